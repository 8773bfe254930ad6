"""What listens on a host, TCP and UDP, as `ss` reports it: the ports a run may take
(links/ports.py) and the listeners on every address the guard checks (links/guard.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from splitbench.infra.hosts import Host

# ss -p's users:(("name",pid=1,fd=3),...)
_PROCESS = re.compile(r'"([^"]+)",pid=(\d+)')


@dataclass(frozen=True)
class Listener:
    """One listening socket: "tcp" or "udp", its local address as ss prints it
    ("0.0.0.0:8080", "[::]:22", "*:5353", "10.0.0.1:20480"), its port, and with
    `processes`, who holds it (pids and command names)."""

    protocol: str
    local: str
    port: int
    pids: frozenset[int] = frozenset()
    names: tuple[str, ...] = ()


def listening(host: Host, processes: bool = False, check: bool = True) -> list[Listener]:
    """Every listening socket on `host` (its network namespace), TCP and UDP. `check`:
    an `ss` that fails raises (HostError); otherwise it reads as nothing listening."""
    result = host.run(["ss", "-Hltunp" if processes else "-Hltun"], check=check)
    found = []
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) < 5 or not fields[4].rsplit(":", 1)[-1].isdigit():
            continue
        held = _PROCESS.findall(line)
        found.append(Listener(fields[0], fields[4], int(fields[4].rsplit(":", 1)[-1]),
                              frozenset(int(pid) for _, pid in held),
                              tuple(name for name, _ in held)))
    return found
