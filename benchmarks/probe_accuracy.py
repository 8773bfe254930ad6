"""How close is splitbench's request-response probe to sockperf on the same link?

Builds embedded-lab links (namespaces as root, loopback otherwise), runs the project's
probe and `sockperf ping-pong --full-rtt` on each, at 64 B and 16 KB, and fits the
payload sweep. Prints figures; asserts nothing (machines here are shared and noisy).

    .venv/bin/python benchmarks/probe_accuracy.py [--samples 2000] [--links direct,delayed]
Goal (issue 3): probe p50 within 1.3x of sockperf's p50.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

from splitbench.infra import teardown
from splitbench.links import lab, tool_output, verify

LINKS = [
    {"pair": "bench", "link": "direct", "index": 1, "mode": "embedded"},
    {"pair": "bench", "link": "delayed", "index": 2, "mode": "embedded", "delay_ms": 0.2},
]
SIZES = [64, 1024, 4096, 16384, 65536, 262144]


def measure(spec: dict, samples: int, sockperf_seconds: int) -> list[dict]:
    link = lab.ensure_link(spec)
    key = f"bench-{spec['link']}"
    verify.serve(link, "probe", key, [sys.executable, "-m", "splitbench.remote.probe", "serve",
                                      link.addr_b, str(link.ports.probe)], link.ports.probe)
    verify.serve(link, "sockperf", key, ["sockperf", "server", "--tcp", "-i", link.addr_b,
                                         "-p", str(link.ports.sockperf)], link.ports.sockperf)
    client = [sys.executable, "-m", "splitbench.remote.probe", "client", link.connect_addr,
              str(link.ports.probe), "--sizes", ",".join(map(str, SIZES)),
              "--samples", str(samples)]
    rtts = json.loads(link.host_a.run(client, timeout=900).stdout)
    fit = verify.fixed_overhead(rtts)
    rows = []
    for size in (64, 16384):
        result = link.host_a.run(
            ["sockperf", "ping-pong", "--tcp", "-i", link.connect_addr, "-p",
             str(link.ports.sockperf), "-m", str(size), "-t", str(sockperf_seconds), "--full-rtt"],
            timeout=60)
        sockperf_p50 = tool_output.parse_sockperf(result.stdout)["sockperf_p50_us"]
        probe_p50 = float(np.median(rtts[str(size)]))
        rows.append({"link": spec["link"], "emulation": link.emulation["delay"],
                     "bytes": size, "probe_p50_us": probe_p50,
                     "sockperf_p50_us": sockperf_p50, "ratio": probe_p50 / sockperf_p50,
                     "fit_intercept_us": fit["rr_fixed_us"], "fit_r2": fit["rr_fit_r2"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000, help="round trips per size")
    parser.add_argument("--sockperf-seconds", type=int, default=3,
                        help="how long each sockperf ping-pong runs (after its warm-up)")
    parser.add_argument("--links", default=",".join(spec["link"] for spec in LINKS),
                        help="the links to measure, by name (default: all)")
    args = parser.parse_args()
    wanted = args.links.split(",")
    unknown = set(wanted) - {spec["link"] for spec in LINKS}
    if unknown:
        parser.error(f"--links: no link named {', '.join(sorted(unknown))}")
    # A run state of its own unless one is given, removed once torn down.
    with tempfile.TemporaryDirectory(prefix="sb-bench-") as own_state:
        os.environ.setdefault("SPLITBENCH_STATE", own_state)
        try:
            rows = [row for spec in LINKS if spec["link"] in wanted
                    for row in measure(spec, args.samples, args.sockperf_seconds)]
        finally:
            teardown.teardown()
    print(f"{'link':8} {'delay by':8} {'bytes':>6} {'probe p50':>10} {'sockperf p50':>13} "
          f"{'ratio':>6} {'fit intercept':>14} {'R2':>5}")
    for r in rows:
        print(f"{r['link']:8} {r['emulation']:8} {r['bytes']:>6} {r['probe_p50_us']:>8.1f}us "
              f"{r['sockperf_p50_us']:>11.1f}us {r['ratio']:>6.2f} "
              f"{r['fit_intercept_us']:>12.1f}us {r['fit_r2']:>5.2f}")
    small = {r["link"]: r["probe_p50_us"] for r in rows if r["bytes"] == 64}
    for r in rows[::2]:
        print(f"{r['link']}: fit intercept {r['fit_intercept_us']:.1f} us vs 64 B p50 "
              f"{small[r['link']]:.1f} us")
    worst = max(r["ratio"] for r in rows)
    print(f"worst probe/sockperf p50 ratio: {worst:.2f} (goal <= 1.3)")


if __name__ == "__main__":
    main()
