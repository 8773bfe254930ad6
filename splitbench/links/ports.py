"""Which block of ports a run serves on (links/link.py's `Ports`): one that neither
host of the pair listens on, so that two runs against the same host B, or on the same
host A (two work directories, two users), never take each other's ports.

The block is chosen once per run and pair, at its first real link, and recorded in the
state directory; every later stage reads it from the link. The search starts at a block
named by the run's state directory, so two runs that choose at the same moment start
apart and do not race for the first free one.
"""

from __future__ import annotations

import hashlib

from splitbench.errors import SplitbenchError
from splitbench.infra import files, listeners, procs
from splitbench.infra.hosts import Host
from splitbench.links.link import FIRST_PORT, PORT_BLOCK, PORT_BLOCKS, Ports


class PortsError(SplitbenchError):
    """No block of ports is free on both hosts of a pair."""


def listened(host: Host) -> set[int]:
    """The ports anything listens on at `host`, TCP or UDP, on any address."""
    return {listener.port for listener in listeners.listening(host, check=False)}


def free_block(hosts: list[Host]) -> Ports | None:
    """The first block, from the run's own starting block on, where none of `hosts`
    listens; None when every block is taken."""
    taken = set().union(*(listened(host) for host in hosts))
    start = int(hashlib.sha256(str(procs.state_dir()).encode()).hexdigest(), 16)
    for step in range(PORT_BLOCKS):
        ports = Ports(FIRST_PORT + PORT_BLOCK * ((start + step) % PORT_BLOCKS))
        if not any(port in ports for port in taken):
            return ports
    return None


def for_pair(pair: str, host_a: Host, host_b: Host) -> Ports:
    """The run's block for `pair`: the recorded one, or a free one, recorded. Called
    under the state directory's lab lock (links/real.py)."""
    path = procs.state_dir() / "ports.json"
    known: dict[str, int] = files.read_json(path) or {}
    if pair in known:
        return Ports(known[pair])
    ports = free_block([host_a, host_b])
    if ports is None:
        raise PortsError(f"pair '{pair}': every block of {PORT_BLOCK} ports from "
                         f"{FIRST_PORT} to {FIRST_PORT + PORT_BLOCK * PORT_BLOCKS - 1} has a "
                         "listener on host A or host B; stop what listens there (a run left "
                         "behind: python -m splitbench teardown)")
    files.write_json(path, {**known, pair: ports.base})
    return ports
