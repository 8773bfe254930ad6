"""Which block of ports a run serves on (links/link.py's `Ports`): one that neither
host of the pair listens on, so that two runs against the same host B, or on the same
host A (two work directories, two users), never take each other's ports; and one that
neither host's kernel gives outgoing connections (its ephemeral range), whose closed
connections would hold a port in TIME_WAIT, where no server can bind it, for a minute.

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
from splitbench.infra.port_blocks import FIRST_PORT, PORT_BLOCK, PORT_BLOCKS
from splitbench.links.link import Ports


class PortsError(SplitbenchError):
    """No block of ports is free on both hosts of a pair."""


def listened(host: Host) -> set[int]:
    """The ports anything listens on at `host`, TCP or UDP, on any address."""
    return {listener.port for listener in listeners.listening(host, check=False)}


RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
RESERVED_FILE = "/proc/sys/net/ipv4/ip_local_reserved_ports"


def ephemeral(host: Host) -> set[int]:
    """The ports `host`'s kernel may give an outgoing connection, IPv4 or IPv6: its
    net.ipv4.ip_local_port_range less its net.ipv4.ip_local_reserved_ports (none when
    they cannot be read)."""
    done = host.run(["cat", RANGE_FILE, RESERVED_FILE], check=False)
    lines = done.stdout.splitlines()
    if done.returncode or not lines:
        return set()
    low, high = map(int, lines[0].split())
    return set(range(low, high + 1)) - port_list(lines[1] if len(lines) > 1 else "")


def port_list(text: str) -> set[int]:
    """The ports of a sysctl port list: "20480-29439,30000"."""
    ports: set[int] = set()
    for item in filter(None, text.strip().split(",")):
        low, _, high = item.partition("-")
        ports.update(range(int(low), int(high or low) + 1))
    return ports


def blocks() -> list[Ports]:
    """Every block, from the run's own starting block on."""
    start = int(hashlib.sha256(str(procs.state_dir()).encode()).hexdigest(), 16)
    return [Ports(FIRST_PORT + PORT_BLOCK * ((start + step) % PORT_BLOCKS))
            for step in range(PORT_BLOCKS)]


def _meets(ports: Ports, unusable: set[int]) -> bool:
    """Whether any port of the block is in `unusable` (a block's 128 lookups, not a
    walk over a kernel's 28,000 ephemeral ports)."""
    return any(port in unusable for port in range(ports.base, ports.last + 1))


def free_block(hosts: list[Host]) -> Ports | None:
    """The first block where none of `hosts` listens and none gives outgoing
    connections a port; None when there is none."""
    unusable = set().union(*(listened(host) for host in hosts),
                           *(ephemeral(host) for host in hosts))
    return next((ports for ports in blocks() if not _meets(ports, unusable)), None)


def why_none_free(hosts: list[Host]) -> str:
    """Why free_block found none, and what to do about it."""
    first, last = FIRST_PORT, FIRST_PORT + PORT_BLOCK * PORT_BLOCKS - 1
    outgoing = {host.name: ephemeral(host) for host in hosts}  # one read per host
    crowded = [name for name, ports_out in outgoing.items()
               if all(_meets(ports, ports_out) for ports in blocks())]
    if crowded:
        return (f"ports {first}-{last}, where splitbench serves, lie in the ephemeral port "
                f"range of host {' and host '.join(crowded)} (net.ipv4.ip_local_port_range), "
                "where a closed outgoing connection holds its port for a minute and a server "
                f"cannot bind it; reserve them there: sudo sysctl -w "
                f"net.ipv4.ip_local_reserved_ports={first}-{last}")
    return (f"every block of {PORT_BLOCK} ports from {first} to {last} has a listener on "
            "host A or host B; stop what listens there (a run left behind: python -m "
            "splitbench teardown)")


def for_pair(pair: str, host_a: Host, host_b: Host) -> Ports:
    """The run's block for `pair`: the recorded one, or a free one, recorded. Called
    under the state directory's lab lock (links/real.py)."""
    path = procs.state_dir() / "ports.json"
    known: dict[str, int] = files.read_json(path) or {}
    if pair in known:
        return Ports(known[pair])
    ports = free_block([host_a, host_b])
    if ports is None:
        raise PortsError(f"pair '{pair}': {why_none_free([host_a, host_b])}")
    files.write_json(path, {**known, pair: ports.base})
    return ports
