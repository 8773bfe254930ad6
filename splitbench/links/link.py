"""A link between hosts A and B of a pair, and the ports its services listen on.

Embedded links (`lab`) and real ones (`real`) both end as a `Link`: the record every
later stage reads to reach host B over exactly that link.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TypedDict

from splitbench.infra.hosts import Host, HostJson

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


class Emulation(TypedDict, total=False):
    """How a link is made and what shapes it (`Link.emulation`): lab.py's and real.py's."""

    mode: str  # "netns-veth", "loopback" or "real"
    rate: str  # what shapes the rate: "tbf", "netem" or "none" (with why)
    rate_gbit_a_to_b: float | None
    rate_gbit_b_to_a: float | None
    delay: str  # what adds the delay: "netem", "relay" or "none"
    delay_ms: float
    # What a message may send above the rate before the shaper holds it (a wire: 0).
    burst_bytes_a_to_b: int
    burst_bytes_b_to_a: int
    applied: list[list[str]]  # the commands that made it
    qdiscs: dict[str, str]  # per namespace: `tc qdisc show` of its end
    cpus_a: str | None  # the embedded hosts' CPUs (taskset lists)
    cpus_b: str | None
    relay_argv: list[str]  # the delay relay's command line


class LinkJson(TypedDict):
    """A `Link` as JSON (`Link.to_json`): links/<pair>__<link>.json in the state directory."""

    pair: str
    name: str
    host_a: HostJson
    host_b: HostJson
    addr_a: str
    addr_b: str
    connect_addr: str
    interface_a: str | None
    interface_b: str | None
    emulation: Emulation


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
    emulation: Emulation = field(default_factory=dict)

    def to_json(self) -> LinkJson:
        data = asdict(self)
        data["host_a"] = asdict(self.host_a)
        data["host_b"] = asdict(self.host_b)
        return data

    @classmethod
    def from_json(cls, data: LinkJson) -> Link:
        data = dict(data)
        data["host_a"] = Host(**data["host_a"])
        data["host_b"] = Host(**data["host_b"])
        return cls(**data)
