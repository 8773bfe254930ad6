"""Link verification: throughput each way and both ways, ping, request-response latency."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from splitbench import pairs
from splitbench.contracts.results import link as link_result
from splitbench.contracts.slices import LinkCheckSettings, LinkSlice
from splitbench.infra import (
    fits,
    interference,
    parquet_io,
    precision,
    privilege,
    procs,
    wakeup,
)
from splitbench.infra.hosts import Host, HostError
from splitbench.infra.ssh_errors import SSHError
from splitbench.links import history, lab, real
from splitbench.links.figures import LinkFacts, LinkRow, SockperfFigures, ThroughputFigures
from splitbench.links.link import Emulation, Link
from splitbench.links.tool_output import LinkError, parse_iperf, parse_ping, parse_sockperf
from splitbench.remote import linkfacts, probe

VERIFICATION_FAILURES = (LinkError, real.SetupError, HostError, SSHError)

# The link contract's figures: null in a failed link's row.
FIGURES = ("a_to_b_gbps", "b_to_a_gbps", "bidir_gbps", "ping_ms", "rr16k_p50_us",
           "rr_fixed_us", "negotiated_gbps")


def _require(host: Host, tool: str, where: str) -> None:
    if not _has(host, tool):
        raise LinkError(f"{where}: {tool} is not installed on host {host.name} "
                        f"(run ./bootstrap.sh setup, or apt-get install {tool})")


def _has(host: Host, tool: str) -> bool:
    return not host.missing_tools([tool])


def serve(link: Link, role: str, key: str, argv: list[str], port: int) -> None:
    """Start a measuring server on B (recorded as `{role}-{key}`) and wait until it
    listens on B's link address: a relay on A would accept before B is there."""
    server = link.host_b.spawn(argv, role=role, key=f"{role}-{key}",
                               extra={"pair": link.pair},
                               log_path=procs.state_dir() / "logs" / f"{role}-{key}.log")
    link.host_b.wait_listening(link.addr_b, port, timeout=10, server=server)


@contextlib.contextmanager
def latency_probe(link: Link) -> Iterator[Callable[[int], float]]:
    """B's echo server on the link for the block; yields measure(samples): the median
    64 B request-response time (us) from A along the path the RPC traffic takes."""
    name = f"{link.pair}__{link.name}"
    try:
        serve(link, "probe", name,
              probe.server_argv(link.host_b.python, link.addr_b, link.ports.probe),
              link.ports.probe)

        def measure(samples: int) -> float:
            with link.host_a.entered():
                rtts = probe.measure(link.connect_addr, link.ports.probe, [64], samples)
            return float(np.median(rtts["64"]))

        yield measure
    finally:
        procs.stop(f"probe-{name}")


def verify(spec: LinkSlice, settings: LinkCheckSettings, out: str | Path) -> pd.DataFrame:
    """Set up (or adopt) the link, prove and measure it, write its one-row Parquet."""
    where = f"pair '{spec['pair']}', link '{spec['link']}'"
    link = pairs.ensure_link(spec)
    for host in (link.host_a, link.host_b):
        for tool in ("iperf3", "ping", "ss"):
            _require(host, tool, where)
    key = f"{spec['pair']}__{spec['link']}"
    with_sockperf = (settings.get("sockperf", True) and _has(link.host_a, "sockperf")
                     and _has(link.host_b, "sockperf"))
    servers = {
        "iperf3": (["iperf3", "-s", "-B", link.addr_b, "-p", str(link.ports.iperf)],
                   link.ports.iperf),
        "probe": (probe.server_argv(link.host_b.python, link.addr_b, link.ports.probe),
                   link.ports.probe),
    }
    if with_sockperf:
        servers["sockperf"] = (["sockperf", "server", "--tcp", "-i", link.addr_b, "-p",
                                str(link.ports.sockperf)], link.ports.sockperf)
    commands: list[list[str]] = [argv for argv, _ in servers.values()]
    row: LinkRow = {"route_dev_a": _check_route(link, where)}
    try:
        for role, (argv, port) in servers.items():
            serve(link, role, key, argv, port)
        hosts = {"a": link.host_a, "b": link.host_b}
        meter = interference.Meter(hosts)
        with wakeup.during(settings, hosts) as held, \
                meter.stretch(interference.own_processes(link.pair, [])):
            row.update(held)
            _measure(link, settings, commands, where, with_sockperf, row)
        # What else used the CPUs while the link was measured: the tables flag it.
        row.update(meter.figures())
    finally:
        for role in servers:
            procs.stop(f"{role}-{key}")
    row.update(_facts(link, spec, row, settings))
    row.update(
        pair=spec["pair"],
        link=spec["link"],
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
        # Bytes a message may send above the rate (tbf's bucket; 0 on a wire).
        burst_bytes_a_to_b=link.emulation.get("burst_bytes_a_to_b", 0),
        burst_bytes_b_to_a=link.emulation.get("burst_bytes_b_to_a", 0),
        ping_includes_delay=link.emulation["delay"] != "relay",
        # The hosts whose link interface is their LAN, compared as it is (links/real.py).
        lan_hosts=" and ".join(s.upper() for s in link.emulation.get("lan", [])) or None,
        iperf3_version=_version(link.host_a, ["iperf3", "--version"]),
        sockperf_version=_version(link.host_a, ["sockperf", "--version"]) if with_sockperf
        else None,
        measured_at=datetime.now(UTC).isoformat(),
    )
    row["fingerprint"] = fingerprint(row)
    changes = history.compare_and_keep(row, out, settings)
    row["flags"] = "; ".join([*row.pop("_flags"), *changes]) or None
    row["status"] = "ok"
    for flag in row["flags"].split("; ") if row["flags"] else []:
        print(f"WARNING {where}: {flag}", flush=True)
    frame = pd.DataFrame([row])
    parquet_io.write(frame, out, {
        "config": spec, "settings": settings, "commands": commands,
        "emulation": link.emulation, "fingerprint": row["fingerprint"],
    })
    return frame


def write_failure(spec: LinkSlice, settings: LinkCheckSettings, error: Exception,
                  out: str | Path) -> pd.DataFrame:
    """The one-row Parquet of a link that could not be verified: its pair, link, status
    "failed" and reason, every figure null, so that the tables show it and the run's
    checks name it."""
    reason = str(error) or type(error).__name__
    row: LinkRow = {
        "pair": spec["pair"], "link": spec["link"], "status": "failed", "error": reason,
        **dict.fromkeys(FIGURES), "fingerprint": None,
        "flags": f"\u2717 verification failed: {reason.splitlines()[0]}",
        "measured_at": datetime.now(UTC).isoformat(),
    }
    frame = pd.DataFrame([row])
    parquet_io.write(frame, out, {"config": spec, "settings": settings, "error": reason})
    return frame


def verification_failure(pair: str, link: str) -> str | None:
    """Why the link's verification failed (its results row says), or None: for the
    stages that need the link to work. A link not verified yet has no reason."""
    path = Path(link_result(pair, link))
    if not path.exists():
        return None
    row = pd.read_parquet(path).iloc[0]
    if row.get("status") != "failed":
        return None
    return f"link {pair}/{link} failed verification: {row.get('error')}"


def _measure(link: Link, settings: LinkCheckSettings, commands: list, where: str,
             with_sockperf: bool, row: LinkRow) -> None:
    """Throughput, ping, request-response latency (and sockperf) into row."""
    row.update(_throughput(link, settings, commands, where))
    row.update(_ping(link, commands, where))
    row.update(_request_response(link, settings, commands))
    if with_sockperf:
        row.update(_sockperf(link, settings, commands))


def _check_route(link: Link, where: str) -> str:
    """Prove A reaches B over exactly this link's interface (a route lookup on A)."""
    route = link.host_a.run(["ip", "route", "get", link.addr_b], check=False)
    found = re.search(r"\bdev (\S+)", route.stdout)
    device = found.group(1) if found else ""
    expected = link.interface_a or "lo"
    if device != expected:
        raise LinkError(f"{where}: host {link.host_a.name} routes {link.addr_b} via "
                        f"'{device or route.stderr.strip()}', not via {expected}")
    return device


def _counter(host: Host, ifname: str | None, name: str) -> int | None:
    if ifname is None:
        return None
    result = host.run(["cat", f"/sys/class/net/{ifname}/statistics/{name}"], check=False)
    return int(result.stdout) if result.returncode == 0 else None


def _throughput(link: Link, settings: LinkCheckSettings, commands: list,
                where: str) -> ThroughputFigures:
    """iperf3 A->B, B->A and both at once, `iperf_repeats` times: median and spread.

    iperf3 talks to B's own address, past any delay relay: the rate is set by the link
    (and its shaping), and a userspace relay would measure itself instead.
    """
    base = ["iperf3", "-c", link.addr_b, "-p", str(link.ports.iperf),
            "-t", str(settings["iperf_seconds"]), "-O", str(settings["iperf_omit"]),
            "-P", str(settings["iperf_streams"]), "-J"]
    if settings.get("iperf_block"):
        base += ["-l", str(settings["iperf_block"])]
    runs: dict[str, list[dict]] = {"fwd": [], "rev": [], "bidir": []}
    tx_before = _counter(link.host_a, link.interface_a, "tx_bytes")
    for _ in range(settings["iperf_repeats"]):
        if throughput_known(runs, settings.get("iperf_spread_rel")):
            break
        for label, extra in (("fwd", []), ("rev", ["-R"]), ("bidir", ["--bidir"])):
            argv = [*base, *extra]
            commands.append(argv)
            timeout = settings["iperf_seconds"] + settings["iperf_omit"] + 30
            try:
                runs[label].append(_iperf_once(link.host_a, argv, timeout))
            except (ValueError, KeyError, LinkError) as exc:
                raise LinkError(f"{where}: iperf3 from host {link.host_a.name} to "
                                f"{link.addr_b} failed: {exc}") from exc
    tx_after = _counter(link.host_a, link.interface_a, "tx_bytes")
    a_to_b = [r["a_to_b"] for r in runs["fwd"]]
    b_to_a = [r["b_to_a"] for r in runs["rev"]]
    bidir = [r["a_to_b"] + r["b_to_a"] for r in runs["bidir"]]
    out: ThroughputFigures = {"iperf_repeats": len(runs["fwd"])}
    for name, values in (("a_to_b", a_to_b), ("b_to_a", b_to_a), ("bidir", bidir)):
        out[f"{name}_gbps"] = float(np.median(values))
        out[f"{name}_gbps_min"] = float(min(values))
        out[f"{name}_gbps_max"] = float(max(values))
    out["retransmits_a_to_b"] = int(sum(r["retransmits"] or 0 for r in runs["fwd"]))
    out["retransmits_b_to_a"] = int(sum(r["retransmits"] or 0 for r in runs["rev"]))
    out["iperf_cpu_a_pct"] = float(np.median([r["cpu_local_pct"] for r in runs["fwd"]]))
    out["iperf_cpu_b_pct"] = float(np.median([r["cpu_remote_pct"] for r in runs["fwd"]]))
    if tx_before is not None and tx_after is not None:
        # The interface's own counter must have carried the test traffic.
        moved = tx_after - tx_before
        out["interface_tx_bytes"] = moved
        expected = out["a_to_b_gbps"] * 1e9 / 8 * settings["iperf_seconds"] * 0.5
        if moved < expected:
            raise LinkError(f"{where}: iperf3 traffic did not cross {link.interface_a} on "
                            f"host {link.host_a.name} ({moved} bytes counted)")
    return out


# The rule's first look at the iperf3 runs: two per direction, the fewest with a spread.
IPERF_FIRST_LOOK = 2


def throughput_known(runs: dict[str, list[dict]], spread_rel: float | None) -> bool:
    """Whether every direction's throughput is known to `spread_rel` (half the spread
    over its runs, relative to their median), looked at only at fixed checkpoints
    (IPERF_FIRST_LOOK runs, then twice as many, ...: infra/precision.py's rule)."""
    if spread_rel is None or not precision.is_checkpoint(len(runs["fwd"]), IPERF_FIRST_LOOK):
        return False
    for values in ([r["a_to_b"] for r in runs["fwd"]], [r["b_to_a"] for r in runs["rev"]],
                   [r["a_to_b"] + r["b_to_a"] for r in runs["bidir"]]):
        middle = float(np.median(values))
        if not middle or (max(values) - min(values)) / 2 / middle > spread_rel:
            return False
    return True


# What iperf3 says when its server still finishes the previous test: "busy", or, on a
# loaded machine, a reset of the new test's control connection (at its first message,
# the cookie, or at the server's reply) or a refused one (the server listens again only
# once it has cleaned up; all seen with two pairs verifying their links at once on two
# cores). No data moved; the test is run again, for up to 10 s: a server that is really
# gone still fails the check with its own error.
SERVER_NOT_READY = ("busy", "Connection reset by peer", "Connection refused")


def _iperf_once(host: Host, argv: list[str], timeout: float) -> dict:
    """One iperf3 run; waits while the server still finishes the previous test."""
    for _ in range(20):
        result = host.run(argv, timeout=timeout, check=False)
        report = json.loads(result.stdout)
        if not any(sign in report.get("error", "") for sign in SERVER_NOT_READY):
            return parse_iperf(report)
        time.sleep(0.5)
    return parse_iperf(report)


def _ping(link: Link, commands: list, where: str) -> dict:
    interval = "0.05" if lab.is_root() else "0.2"
    ping = ["ping", "-n", "-c", "20", "-i", interval, "-W", "2", link.addr_b]
    commands.append(ping)
    result = link.host_a.run(ping, timeout=30, check=False)
    try:
        return parse_ping(result.stdout)
    except LinkError as exc:
        raise LinkError(f"{where}: host {link.host_a.name} cannot reach {link.addr_b}: "
                        f"{exc}") from exc


def _request_response(link: Link, settings: LinkCheckSettings, commands: list) -> dict:
    payload = settings["rr_payload_bytes"]
    sizes = sorted({*settings["rr_sizes"], payload})
    client = [sys.executable, "-m", "splitbench.remote.probe", "client", link.connect_addr,
              str(link.ports.probe), "--sizes", ",".join(map(str, sizes)),
              "--samples", str(settings["rr_samples"])]
    commands.append(client)
    rtts = json.loads(link.host_a.run(client, timeout=600).stdout)
    sample = np.array(rtts[str(payload)])
    return {
        "rr16k_p50_us": float(np.percentile(sample, 50)),
        "rr16k_p90_us": float(np.percentile(sample, 90)),
        "rr16k_p99_us": float(np.percentile(sample, 99)),
        "rr64_p50_us": float(np.median(rtts[str(min(sizes))])),
        "rr_payload_bytes": payload,
        **fixed_overhead(rtts),
    }


def _sockperf(link: Link, settings: LinkCheckSettings, commands: list) -> SockperfFigures:
    out: SockperfFigures = {}
    for size, prefix in ((64, "sockperf64"), (settings["rr_payload_bytes"], "sockperf16k")):
        argv = ["sockperf", "ping-pong", "--tcp", "-i", link.connect_addr, "-p",
                str(link.ports.sockperf), "-m", str(size), "-t", "1", "--full-rtt"]
        commands.append(argv)
        result = link.host_a.run(argv, timeout=60, check=False)
        parsed = parse_sockperf(result.stdout + result.stderr)
        out.update({k.replace("sockperf", prefix): v for k, v in parsed.items()})
    return out


def _facts(link: Link, spec: LinkSlice, row: LinkRow,
           settings: LinkCheckSettings) -> LinkFacts:
    """What makes two runs comparable, and what the kernel says the link negotiated."""
    out: LinkFacts = {}
    flags: list[str] = []
    for side, host, ifname in (("a", link.host_a, link.interface_a),
                               ("b", link.host_b, link.interface_b)):
        facts = _interface_facts(host, ifname)
        out[f"driver_{side}"] = facts.get("driver")
        out[f"mtu_{side}"] = facts.get("mtu")
        out[f"speed_mbps_{side}"] = facts.get("speed_mbps")
        out[f"kernel_{side}"] = host.run(["uname", "-r"]).stdout.strip()
        out[f"tcp_cc_{side}"] = _read(host, "/proc/sys/net/ipv4/tcp_congestion_control")
        out[f"slow_start_after_idle_{side}"] = _read(
            host, "/proc/sys/net/ipv4/tcp_slow_start_after_idle")
        out[f"offloads_{side}"] = _offloads(host, ifname)
        if side == "a":
            out["negotiated_gbps"] = facts.get("negotiated_gbps")
            out["thunderbolt"] = json.dumps(facts.get("thunderbolt")) \
                if facts.get("thunderbolt") else None
            flags += linkfacts.flags(facts, row["a_to_b_gbps"],
                                     expected_gbps=spec.get("expected_gbps"))
    ranges = {way: (row.get(f"{way}_gbps_min"), row.get(f"{way}_gbps_max"))
              for way in ("a_to_b", "b_to_a")}
    asym = linkfacts.asymmetry(
        row["a_to_b_gbps"], row["b_to_a_gbps"], settings["asymmetry_threshold"],
        *(r if None not in r else None for r in (ranges["a_to_b"], ranges["b_to_a"])))
    if asym:
        flags.append(asym)
    flags += emulation_shortfall(link.emulation, row)
    out["_flags"] = flags
    return out


# Below this share of its emulated rate, a link did not get the rate it emulates (the
# machine's CPUs could not carry it during the check): the link's figures say so.
EMULATED_RATE_SHARE = 0.85


def emulation_shortfall(emulation: Emulation, row: LinkRow) -> list[str]:
    """A flag per direction whose measured throughput fell short of the emulated rate."""
    out = []
    for way, label in (("a_to_b", "A→B"), ("b_to_a", "B→A")):
        emulated, measured = emulation.get(f"rate_gbit_{way}"), row.get(f"{way}_gbps")
        if emulated and measured is not None and measured < EMULATED_RATE_SHARE * emulated:
            out.append(f"{label} measured {measured:.2f} Gbit/s, "
                       f"{1 - measured / emulated:.0%} below the emulated {emulated:.2f}: "
                       "the machine did not carry the emulated rate during the check")
    return out


def _interface_facts(host: Host, ifname: str | None) -> dict:
    if ifname is None:
        return {}
    # Read sysfs from inside the host: a namespace sees its own /sys/class/net.
    # linkfacts needs only the standard library: its source runs on any host as is.
    code = (Path(linkfacts.__file__).read_text()
            + "\nimport json, sys\nprint(json.dumps(interface_facts(sys.argv[1])))\n")
    result = host.run([host.python, "-c", code, ifname], check=False)
    return json.loads(result.stdout) if result.returncode == 0 else {}


def _read(host: Host, path: str) -> str | None:
    result = host.run(["cat", path], check=False)
    return result.stdout.strip() if result.returncode == 0 else None


def _offloads(host: Host, ifname: str | None) -> str | None:
    # By its full path: Debian puts ethtool in /usr/sbin, off an ordinary user's PATH.
    ethtool = privilege.tool_path(host, "ethtool") if ifname is not None else None
    if ethtool is None:
        return None
    result = host.run([ethtool, "-k", ifname], check=False)
    wanted = ("tcp-segmentation-offload", "generic-segmentation-offload",
              "generic-receive-offload", "large-receive-offload")
    found = dict(re.findall(r"^(\S+): (on|off)", result.stdout, flags=re.M))
    return ",".join(f"{k}={found[k]}" for k in wanted if k in found) or None


def fingerprint(row: LinkRow) -> str:
    """What identifies the link a cell was measured on (not the measurement noise)."""
    keys = ("pair", "link", "interface_a", "addr_a", "addr_b", "emulation_mode",
            "emulation_rate", "emulation_delay", "emulated_rate_gbit_a_to_b",
            "emulated_rate_gbit_b_to_a", "emulated_delay_ms", "negotiated_gbps",
            "mtu_a", "mtu_b", "driver_a", "driver_b", "burst_bytes_a_to_b",
            "burst_bytes_b_to_a")
    text = json.dumps({k: row.get(k) for k in keys}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _version(host: Host, argv: list[str]) -> str:
    result = host.run(argv, check=False)
    text = (result.stdout or result.stderr).strip()
    return text.splitlines()[0] if result.returncode == 0 and text else ""


def fixed_overhead(rtts: dict[str, list[float]]) -> dict[str, float]:
    """Fit p50 RTT against payload: intercept = fixed overhead (us), slope = us per KB."""
    sizes = np.array(sorted(int(s) for s in rtts))
    p50 = np.array([np.median(rtts[str(s)]) for s in sizes])
    intercept, slope, r2 = fits.theil_sen(sizes / 1024, p50)
    return {"rr_fixed_us": intercept, "rr_us_per_kb": slope, "rr_fit_r2": r2}
