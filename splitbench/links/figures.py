"""A link check's one-row table (`results/links/<pair>/<link>.parquet`) as typed dicts,
by the part of the check that fills it: what `links.verify` writes and the link history
keeps."""

from __future__ import annotations

from typing import TypedDict

from splitbench.infra import interference


# The link's row, by the part that fills it (a failed link's row: its FIGURES None).
class ThroughputFigures(TypedDict, total=False):
    """`_throughput`: iperf3 each way and both at once, median, min and max of repeats."""

    iperf_repeats: int
    a_to_b_gbps: float | None
    a_to_b_gbps_min: float
    a_to_b_gbps_max: float
    b_to_a_gbps: float | None
    b_to_a_gbps_min: float
    b_to_a_gbps_max: float
    bidir_gbps: float | None
    bidir_gbps_min: float
    bidir_gbps_max: float
    retransmits_a_to_b: int
    retransmits_b_to_a: int
    iperf_cpu_a_pct: float
    iperf_cpu_b_pct: float
    interface_tx_bytes: int  # where A's interface counts its bytes


class SockperfFigures(TypedDict, total=False):
    """`_sockperf`: request-response percentiles (us) at 64 B and the RR payload."""

    sockperf64_p50_us: float
    sockperf64_p90_us: float | None
    sockperf64_p99_us: float | None
    sockperf16k_p50_us: float
    sockperf16k_p90_us: float | None
    sockperf16k_p99_us: float | None


class LinkFacts(TypedDict, total=False):
    """`_facts`: what makes two runs comparable, and what the link negotiated."""

    driver_a: str | None
    driver_b: str | None
    mtu_a: int | None
    mtu_b: int | None
    speed_mbps_a: int | None
    speed_mbps_b: int | None
    kernel_a: str
    kernel_b: str
    tcp_cc_a: str | None
    tcp_cc_b: str | None
    slow_start_after_idle_a: str | None
    slow_start_after_idle_b: str | None
    offloads_a: str | None
    offloads_b: str | None
    negotiated_gbps: float | None
    thunderbolt: str | None  # linkfacts' thunderbolt facts as JSON text
    _flags: list[str]  # joined into `flags` before the row is written


class LinkRow(ThroughputFigures, SockperfFigures, LinkFacts, interference.InterferenceFigures,
              total=False):
    """A link's one-row Parquet: what `verify` measured, or a failed link's (`write_failure`)."""

    route_dev_a: str
    wakeup_latency_a: str
    wakeup_latency_b: str
    ping_ms: float | None
    ping_min_ms: float
    ping_avg_ms: float
    rr16k_p50_us: float | None
    rr16k_p90_us: float
    rr16k_p99_us: float
    rr64_p50_us: float
    rr_payload_bytes: int
    rr_fixed_us: float | None
    rr_us_per_kb: float
    rr_fit_r2: float
    pair: str
    link: str
    interface_a: str | None
    interface_b: str | None
    addr_a: str
    addr_b: str
    emulation_mode: str
    emulation_rate: str
    emulation_delay: str
    emulated_rate_gbit_a_to_b: float | None
    emulated_rate_gbit_b_to_a: float | None
    emulated_delay_ms: float | None
    burst_bytes_a_to_b: int
    burst_bytes_b_to_a: int
    ping_includes_delay: bool
    iperf3_version: str
    sockperf_version: str | None
    measured_at: str
    fingerprint: str | None
    flags: str | None
    status: str  # "ok" or "failed"
    error: str  # why a failed link failed
