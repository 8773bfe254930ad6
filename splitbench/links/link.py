"""A link between hosts A and B of a pair, and the ports its services listen on.

Embedded links (`lab`) and real ones (`real`) both end as a `Link`: the record every
later stage reads to reach host B over exactly that link.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from splitbench.infra.hosts import Host

RPC_PORT = 50052
IPERF_PORT = 5201
PROBE_PORT = 7777
SOCKPERF_PORT = 11111
MAX_WORKERS = 4  # RPC workers per launch, on ports RPC_PORT, RPC_PORT + 1, ...
# vLLM's rendezvous store (host A, every address): one port per launch slot of a pair.
RENDEZVOUS_PORT = 29501
MAX_SLOTS = 18
# What the firewall guard of a real pair keeps off every other network (links/guard.py).
GUARDED_PORTS = ((RPC_PORT, RPC_PORT + MAX_WORKERS - 1),
                 (RENDEZVOUS_PORT, RENDEZVOUS_PORT + MAX_SLOTS - 1))
# Ports the delay relay forwards (iperf3 measures the link itself, past the relay).
SERVICE_PORTS = (*range(RPC_PORT, RPC_PORT + MAX_WORKERS), PROBE_PORT, SOCKPERF_PORT)


@dataclass
class Link:
    """A ready link: where each host is and how A reaches B's services."""

    pair: str
    name: str
    host_a: Host
    host_b: Host
    addr_a: str
    addr_b: str
    # The address A connects to for B's services: B itself, or a delay relay on A.
    connect_addr: str
    interface_a: str | None
    interface_b: str | None
    emulation: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["host_a"] = asdict(self.host_a)
        data["host_b"] = asdict(self.host_b)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Link:
        data = dict(data)
        data["host_a"] = Host(**data["host_a"])
        data["host_b"] = Host(**data["host_b"])
        return cls(**data)
