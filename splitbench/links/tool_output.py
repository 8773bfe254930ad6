"""What the link check's tools print, parsed: iperf3's JSON report, ping's replies and
sockperf's percentiles. A tool that printed no figures raises LinkError with its words."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from splitbench.errors import SplitbenchError


class LinkError(SplitbenchError):
    """A link failed verification; the message names the pair, link and host."""


# Why a link may fail to verify on the user's hardware (unreachable host, missing tool,
# a route around the link, traffic that did not cross it): a result of the matrix,
# recorded as the link's row; its blocks then report it instead of launching.
def parse_iperf(report: dict[str, Any]) -> dict[str, float | None]:
    """Receiver-side rates (Gbit/s) per direction from one iperf3 -J report."""
    if "error" in report:
        raise LinkError(f"iperf3: {report['error']}")
    end = report["end"]
    reverse = bool(report["start"]["test_start"].get("reverse"))
    forward = end["sum_received"]["bits_per_second"] / 1e9
    out: dict[str, float | None] = {
        "retransmits": end.get("sum_sent", {}).get("retransmits"),
        "cpu_local_pct": end.get("cpu_utilization_percent", {}).get("host_total"),
        "cpu_remote_pct": end.get("cpu_utilization_percent", {}).get("remote_total"),
    }
    if "sum_received_bidir_reverse" in end:
        back = end["sum_received_bidir_reverse"]["bits_per_second"] / 1e9
        out.update(a_to_b=forward, b_to_a=back)
    elif reverse:
        out.update(a_to_b=None, b_to_a=forward)
    else:
        out.update(a_to_b=forward, b_to_a=None)
    return out


def parse_ping(text: str) -> dict[str, float]:
    times = [float(t) for t in re.findall(r"time=([\d.]+) ms", text)]
    if not times:
        raise LinkError(f"ping gave no replies: {text.strip()[-300:]}")
    return {
        "ping_ms": float(np.median(times)),
        "ping_min_ms": min(times),
        "ping_avg_ms": float(np.mean(times)),
    }


def parse_sockperf(text: str) -> dict[str, float]:
    """Percentiles (us) from `sockperf ping-pong --full-rtt` output (ANSI colours removed)."""
    clean = re.sub(r"\x1b\[[0-9;]*m", "", text)
    found = {float(p): float(v) for p, v in
             re.findall(r"percentile\s+([\d.]+)\s*=\s*([\d.]+)", clean)}
    if 50.0 not in found:
        raise LinkError(f"sockperf printed no percentiles: {clean.strip()[-300:]}")
    return {"sockperf_p50_us": found[50.0], "sockperf_p90_us": found.get(90.0),
            "sockperf_p99_us": found.get(99.0)}
