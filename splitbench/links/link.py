"""A link between hosts A and B of a pair, and the ports its services listen on.

Embedded links (`lab`) and real ones (`real`) both end as a `Link`: the record every
later stage reads to reach host B over exactly that link.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TypedDict

from splitbench.infra.hosts import Host, HostJson
from splitbench.infra.port_blocks import FIRST_PORT, PORT_BLOCK

MAX_WORKERS = 4  # RPC workers per launch
MAX_SLOTS = 18  # launches of a pair at once: the default, the reference and 16 sweep points
FIRST_POINT_SLOT = 2  # slot 0: a cell's launch, 1: its paired reference, 2...: sweep points
# The block's layout: RPC workers (a set of MAX_WORKERS for each launch slot, where the
# slots' workers share one address: a delay sweep over a real link), then iperf3, the
# probe and sockperf, then a port per slot for the backend's own use (where its ranks
# meet) and an HTTP port per slot.
_SERVICES = MAX_WORKERS * MAX_SLOTS
_BACKEND = _SERVICES + 4
_HTTP = _BACKEND + MAX_SLOTS


@dataclass(frozen=True)
class Ports:
    """The ports one run serves on, all within one block from `base`: the RPC workers
    (B), iperf3, the latency probe and sockperf (B), a port of the backend's own (where
    its processes meet) and the HTTP front (A), a port per launch slot. Two runs against
    the same host B, or on the same host A, take two blocks (links/ports.py), so they
    never share one; the firewall guard covers exactly the run's block."""

    base: int = FIRST_PORT
    # Which slot's set of worker ports this link's launches use (0: the first; a sweep
    # point on a real link: its own, as every point's workers listen on B's one address).
    worker_set: int = 0

    def worker(self, index: int) -> int:
        if not 0 <= index < MAX_WORKERS:
            raise ValueError(f"at most {MAX_WORKERS} RPC workers per launch")
        return self.base + MAX_WORKERS * self._slot(self.worker_set) + index

    @property
    def iperf(self) -> int:
        return self.base + _SERVICES

    @property
    def probe(self) -> int:
        return self.base + _SERVICES + 1

    @property
    def sockperf(self) -> int:
        return self.base + _SERVICES + 2

    def backend_own(self, slot: int) -> int:
        """The port a backend's launch in `slot` may use for itself (vLLM: where its
        ranks meet)."""
        return self.base + _BACKEND + self._slot(slot)

    def http(self, slot: int) -> int:
        return self.base + _HTTP + self._slot(slot)

    @property
    def last(self) -> int:
        return self.base + PORT_BLOCK - 1

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self.base <= port <= self.last

    def relayed(self) -> list[int]:
        """What the delay relay forwards (iperf3 measures the link itself, past it)."""
        return [*(self.worker(i) for i in range(MAX_WORKERS)), self.probe, self.sockperf]

    @staticmethod
    def _slot(slot: int) -> int:
        if not 0 <= slot < MAX_SLOTS:
            raise ValueError(f"at most {MAX_SLOTS} launch slots per pair")
        return slot


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
    lan: list[str]  # a real link's hosts ("a", "b") whose interface is their LAN, as it is
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
    ports: dict[str, int]  # Ports: base, worker_set


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
    ports: Ports = field(default_factory=Ports)

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
        data["ports"] = Ports(**data["ports"]) if "ports" in data else Ports()
        return cls(**data)
