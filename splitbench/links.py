"""Link verification: throughput each way and both ways, ping, request-response latency."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from splitbench import lab, parquet_io, probe, procs
from splitbench.hosts import Host, HostError

RR_SIZES = [64, 1024, 4096, 16384, 65536, 262144]


class LinkError(RuntimeError):
    """A link failed verification; the message names the pair, link and host."""


def listening(host: Host, addr: str, port: int, timeout: float) -> None:
    """Wait until host has a TCP listener on addr:port (without connecting to it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = host.run(["ss", "-Hltn", f"src {addr}:{port}"], check=False).stdout
        if out.strip():
            return
        time.sleep(0.1)
    raise HostError(f"host {host.name}: no listener on {addr}:{port} after {timeout}s")


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


def _require(host: Host, tool: str, where: str) -> None:
    if host.netns is None and shutil.which(tool) is None:
        raise LinkError(f"{where}: {tool} is not installed on host {host.name} "
                        f"(run `make setup`, or apt-get install {tool})")


def verify(spec: dict[str, Any], settings: dict[str, Any], out: str | Path) -> pd.DataFrame:
    """Set up (or adopt) the link, measure it, write its one-row Parquet."""
    where = f"pair '{spec['pair']}', link '{spec['link']}'"
    link = lab.ensure_link(spec)
    for host in (link.host_a, link.host_b):
        for tool in ("iperf3", "ping", "ss"):
            _require(host, tool, where)
    key = f"{spec['pair']}__{spec['link']}"
    logs = procs.state_dir() / "logs"
    commands: list[list[str]] = []
    try:
        server = ["iperf3", "-s", "-B", link.addr_b, "-p", str(lab.IPERF_PORT)]
        link.host_b.spawn(server, role="iperf3", key=f"iperf3-{key}",
                          log_path=logs / f"iperf3-{key}.log")
        listening(link.host_b, link.addr_b, lab.IPERF_PORT, timeout=10)
        probe_server = [sys.executable, "-m", "splitbench.probe", "serve", link.addr_b,
                        str(lab.PROBE_PORT)]
        link.host_b.spawn(probe_server, role="probe", key=f"probe-{key}",
                          log_path=logs / f"probe-{key}.log")
        listening(link.host_b, link.addr_b, lab.PROBE_PORT, timeout=10)
        commands += [server, probe_server]
        row = _measure(link, settings, commands, where)
    finally:
        procs.stop(f"iperf3-{key}")
        procs.stop(f"probe-{key}")
    row.update(
        pair=spec["pair"],
        link=spec["link"],
        negotiated_gbps=None,  # virtual links report no negotiated speed
        interface_a=link.interface_a,
        interface_b=link.interface_b,
        addr_a=link.addr_a,
        addr_b=link.addr_b,
        emulation_mode=link.emulation["mode"],
        emulation_rate=link.emulation["rate"],
        emulation_delay=link.emulation["delay"],
        emulated_rate_gbit_a_to_b=link.emulation.get("rate_gbit_a_to_b"),
        emulated_rate_gbit_b_to_a=link.emulation.get("rate_gbit_b_to_a"),
        emulated_delay_ms=link.emulation.get("delay_ms"),
        ping_includes_delay=link.emulation["delay"] != "relay",
        iperf3_version=_version(link.host_a, ["iperf3", "--version"]),
        measured_at=datetime.now(UTC).isoformat(),
    )
    row["fingerprint"] = fingerprint(row)
    frame = pd.DataFrame([row])
    parquet_io.write(frame, out, {
        "config": spec, "settings": settings, "commands": commands,
        "emulation": link.emulation, "fingerprint": row["fingerprint"],
    })
    return frame


def fingerprint(row: dict[str, Any]) -> str:
    """What identifies the link a cell was measured on (not the measurement noise)."""
    keys = ("pair", "link", "interface_a", "addr_a", "addr_b", "emulation_mode",
            "emulation_rate", "emulation_delay", "emulated_rate_gbit_a_to_b",
            "emulated_rate_gbit_b_to_a", "emulated_delay_ms")
    text = json.dumps({k: row.get(k) for k in keys}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _version(host: Host, argv: list[str]) -> str:
    result = host.run(argv, check=False)
    return (result.stdout or result.stderr).splitlines()[0] if result.returncode == 0 else ""


def _measure(link: lab.Link, settings: dict[str, Any], commands: list, where: str) -> dict:
    row: dict[str, Any] = {}
    seconds = str(settings["iperf_seconds"])
    runs = {}
    for label, extra in (("fwd", []), ("rev", ["-R"]), ("bidir", ["--bidir"])):
        argv = ["iperf3", "-c", link.connect_addr, "-p", str(lab.IPERF_PORT), "-t", seconds,
                "-J", *extra]
        commands.append(argv)
        result = link.host_a.run(argv, timeout=settings["iperf_seconds"] + 30, check=False)
        try:
            runs[label] = parse_iperf(json.loads(result.stdout))
        except (ValueError, KeyError, LinkError) as exc:
            raise LinkError(f"{where}: iperf3 from host {link.host_a.name} to "
                            f"{link.connect_addr} failed: {exc}") from exc
    row["a_to_b_gbps"] = runs["fwd"]["a_to_b"]
    row["b_to_a_gbps"] = runs["rev"]["b_to_a"]
    row["bidir_gbps"] = runs["bidir"]["a_to_b"] + runs["bidir"]["b_to_a"]
    row["retransmits_a_to_b"] = runs["fwd"]["retransmits"]
    interval = "0.05" if lab.is_root() else "0.2"
    ping = ["ping", "-n", "-c", "20", "-i", interval, "-W", "2", link.addr_b]
    commands.append(ping)
    result = link.host_a.run(ping, timeout=30, check=False)
    try:
        row.update(parse_ping(result.stdout))
    except LinkError as exc:
        raise LinkError(f"{where}: host {link.host_a.name} cannot reach {link.addr_b}: "
                        f"{exc}") from exc
    client = [sys.executable, "-m", "splitbench.probe", "client", link.connect_addr,
              str(lab.PROBE_PORT), "--sizes", ",".join(map(str, RR_SIZES)),
              "--samples", str(max(10, settings["rr_samples"] // len(RR_SIZES)))]
    commands.append(client)
    rtts = json.loads(link.host_a.run(client, timeout=300).stdout)
    payload = settings["rr_payload_bytes"]
    if str(payload) not in rtts:
        single = [*client[:-4], "--sizes", str(payload), "--samples",
                  str(settings["rr_samples"])]
        rtts.update(json.loads(link.host_a.run(single, timeout=300).stdout))
    sample = np.array(rtts[str(payload)])
    row.update(
        rr16k_p50_us=float(np.percentile(sample, 50)),
        rr16k_p90_us=float(np.percentile(sample, 90)),
        rr16k_p99_us=float(np.percentile(sample, 99)),
        rr64_p50_us=float(np.median(rtts["64"])),
        rr_payload_bytes=payload,
        **probe.fixed_overhead({s: v for s, v in rtts.items() if int(s) in RR_SIZES}),
    )
    return row
