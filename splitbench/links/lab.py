"""The embedded lab: hosts A and B of a pair on this machine, joined by emulated links.

As root, each host is a network namespace and each link one veth pair with its own /30,
shaped with tc: tbf for rate, netem for delay where the kernel has it. Where it has not
(or without root, on loopback), a userspace relay adds the delay. `ensure_link` is
idempotent and safe to call from every job; what it builds is recorded in the run's
state directory and removed by `teardown.teardown()` at the end of the run.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess

from splitbench.contracts.slices import LinkSlice
from splitbench.infra import files, procs
from splitbench.infra.hosts import Host, HostError
from splitbench.links import relay
from splitbench.links.link import FIRST_POINT_SLOT, Emulation, Link


def is_root() -> bool:
    """Namespaces need root; SPLITBENCH_LAB=loopback forces the unprivileged lab."""
    return os.geteuid() == 0 and os.environ.get("SPLITBENCH_LAB") != "loopback"


def namespace(pair: str, side: str) -> str:
    return f"sb-{pair}-{side}"


def ensure_link(spec: LinkSlice) -> Link:
    """Build the link described by a link slice (plan.link_slice), or return it if built."""
    key = f"{spec['pair']}__{spec['link']}"
    record_path = procs.state_dir() / "links" / f"{key}.json"
    with procs.locked("lab"):
        known = files.read_json(record_path)
        if known is not None:
            link = Link.from_json(known)
            if _still_there(link):
                return link
        link = _build_netns(spec) if is_root() else _build_loopback(spec)
        if link.emulation["delay"] == "relay":
            _start_relay(link, spec.get("delay_ms", 0.0), key)
        files.write_json(record_path, link.to_json())
        return link


def _still_there(link: Link) -> bool:
    if link.host_a.netns:
        present = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
        if link.host_a.netns not in present.stdout:
            return False
    if link.emulation.get("delay") == "relay":
        relay = procs.find(relay_key(link.pair, link.name))
        return relay is not None and procs.is_alive(relay)
    return True


def _addresses(index: int, loopback: bool) -> tuple[str, str]:
    if index > 250:
        raise ValueError("at most 250 links per pair")
    prefix = f"127.0.{index}" if loopback else f"10.213.{index}"
    return f"{prefix}.1", f"{prefix}.2"


def _build_loopback(spec: LinkSlice) -> Link:
    addr_a, addr_b = _addresses(spec["index"], loopback=True)
    delay = "relay" if _wants_delay_path(spec) else "none"
    emulation: Emulation = {
        "mode": "loopback",
        "rate": "none (loopback without root cannot shape)",
        "rate_gbit_a_to_b": None,
        "rate_gbit_b_to_a": None,
        "delay": delay,
        "delay_ms": spec.get("delay_ms", 0.0),
        "applied": [],
    }
    host = Host("local")
    connect = addr_a if delay == "relay" else addr_b
    return Link(spec["pair"], spec["link"], host, host, addr_a, addr_b, connect, None, None,
                emulation)


def _ip(*args: str, netns: str | None = None) -> list[str]:
    argv = ["ip", *args] if netns is None else ["ip", "-n", netns, *args]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise HostError(f"lab: {' '.join(argv)} failed: {result.stderr.strip()}")
    return argv


def _ensure_namespace(name: str) -> None:
    present = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    if name not in present.split():
        _ip("netns", "add", name)
        procs.record_namespace(name)
        _ip("link", "set", "lo", "up", netns=name)
        _quick_acks_on_loopback(name)


# The client reads llama-server over host A's loopback. TCP delays an ACK while the
# receiving process has not read what came (up to 40 ms), and a sender with its small
# congestion window full waits for it: a client the scheduler did not run would delay
# the server's next tokens and merge them into one segment (docs/method.md; measured by
# benchmarks/client_overhead.py).
LOOPBACK_ROUTE = ["local", "127.0.0.1", "dev", "lo", "table", "local", "proto", "kernel",
                  "scope", "host", "src", "127.0.0.1"]


def _quick_acks_on_loopback(netns: str) -> None:
    """ACK every segment on the namespace's loopback at once (route metric quickack)."""
    _ip("route", "change", *LOOPBACK_ROUTE, "quickack", "1", netns=netns)


def loopback_quickack(netns: str | None) -> bool:
    """Whether the namespace's (or this machine's) loopback route ACKs at once."""
    argv = ["ip", *(["-n", netns] if netns else []), "route", "show", "table", "local",
            "127.0.0.1"]
    return "quickack 1" in subprocess.run(argv, capture_output=True, text=True).stdout


def _build_netns(spec: LinkSlice) -> Link:
    pair, index = spec["pair"], spec["index"]
    ns_a, ns_b = namespace(pair, "a"), namespace(pair, "b")
    for name in (ns_a, ns_b):
        _ensure_namespace(name)
    if_a = if_b = f"sbl{index}"
    addr_a, addr_b = _addresses(index, loopback=False)
    for ns in (ns_a, ns_b):
        subprocess.run(["ip", "-n", ns, "link", "del", if_a], capture_output=True)
    applied = [
        _ip("link", "add", if_a, "netns", ns_a, "type", "veth", "peer", "name", if_b,
            "netns", ns_b)
    ]
    for ns, ifname, addr in ((ns_a, if_a, addr_a), (ns_b, if_b, addr_b)):
        applied.append(_ip("addr", "add", f"{addr}/30", "dev", ifname, netns=ns))
        applied.append(_ip("link", "set", ifname, "up", netns=ns))
    emulation = _shape(spec, ns_a, if_a, ns_b, if_b, applied)
    connect = addr_a if emulation["delay"] == "relay" else addr_b
    cpus_a, cpus_b = split_cpus()
    emulation.update(cpus_a=cpus_a, cpus_b=cpus_b)
    return Link(pair, spec["link"], Host("a", ns_a, cpus=cpus_a), Host("b", ns_b, cpus=cpus_b),
                addr_a, addr_b, connect, if_a, if_b, emulation)


def split_cpus() -> tuple[str | None, str | None]:
    """Host A's and host B's CPUs: the first and second half of those this process may
    use, as two machines would each have their own. Without two CPUs, both share all.
    (Unpinned, the scheduler moves the two servers between cores from request to
    request, and the same cell's decode varies from launch to launch: docs/method.md.)"""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    half = len(cpus) // 2
    return _cpu_list(cpus[:half]), _cpu_list(cpus[half:])


def _cpu_list(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus)


def _qdisc(ns: str, ifname: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["tc", "-n", ns, "qdisc", "replace", "dev", ifname, "root", *args],
        capture_output=True, text=True,
    )


def _shape(
    spec: LinkSlice, ns_a: str, if_a: str, ns_b: str, if_b: str, applied: list
) -> Emulation:
    """Apply rate and delay on each direction's egress; report what really took."""
    rate_ab = spec.get("rate_gbit")
    rate_ba = spec.get("rate_gbit_b_to_a", rate_ab)
    delay_ms = spec.get("delay_ms", 0.0)
    emulation: Emulation = {
        "mode": "netns-veth",
        "rate": "none",
        "rate_gbit_a_to_b": rate_ab,
        "rate_gbit_b_to_a": rate_ba,
        "delay": "none",
        "delay_ms": delay_ms,
        # What a message may send above the rate before the shaper holds it (a wire: 0).
        "burst_bytes_a_to_b": 0,
        "burst_bytes_b_to_a": 0,
    }
    use_netem = _wants_delay_path(spec) and netem_available(ns_a, if_a)
    for ns, ifname, rate, direction in ((ns_a, if_a, rate_ab, "a_to_b"),
                                        (ns_b, if_b, rate_ba, "b_to_a")):
        if use_netem:
            args = ["netem", "delay", f"{delay_ms * 1000:.0f}us"]
            if rate:
                args += ["rate", f"{rate * 1000:.0f}mbit"]
            kind = "netem"
        elif rate:
            burst = tbf_burst_bytes(rate)
            args = ["tbf", "rate", f"{rate * 1000:.0f}mbit", "burst", str(burst),
                    "latency", "20ms"]
            kind = "tbf"
            emulation[f"burst_bytes_{direction}"] = burst
        else:
            continue
        result = _qdisc(ns, ifname, *args)
        if result.returncode != 0:
            raise HostError(f"lab: tc {' '.join(args)} on {ns}/{ifname}: {result.stderr}")
        applied.append(["tc", "-n", ns, "qdisc", "replace", "dev", ifname, "root", *args])
        if rate:
            emulation["rate"] = kind
    if use_netem:
        emulation["delay"] = "netem"
    elif _wants_delay_path(spec):
        emulation["delay"] = "relay"
    emulation["applied"] = applied
    emulation["qdiscs"] = {
        ns: subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", ifname],
                           capture_output=True, text=True).stdout.strip()
        for ns, ifname in ((ns_a, if_a), (ns_b, if_b))
    }
    return emulation


# tbf lets a full bucket through at the veth's own speed. A decode step's largest message
# (a token's logits) must cross at the link's rate as on a wire, so the bucket is small:
# 0.25 ms at rate (why, measured: docs/method.md, "Measurement conditions").
TBF_BURST_S = 0.00025
TBF_MIN_BURST = 16384  # a few full-size segments (tbf splits larger GSO packets)


def tbf_burst_bytes(rate_gbit: float) -> int:
    """The tbf bucket for a rate: TBF_BURST_S at rate, at least TBF_MIN_BURST."""
    return max(int(rate_gbit * 1e9 / 8 * TBF_BURST_S), TBF_MIN_BURST)


def netem_available(ns: str, ifname: str) -> bool:
    """Probe the kernel for netem by installing (then removing) a no-op netem qdisc."""
    probe = _qdisc(ns, ifname, "netem", "delay", "0us")
    if probe.returncode == 0:
        subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", ifname, "root"],
                       capture_output=True)
        return True
    return False


def _wants_delay_path(spec: LinkSlice) -> bool:
    """A delay to add, or a sweep that needs every point on the same (relay) path even
    at zero delay: the relay's own per-message cost must not change between points."""
    return bool(spec.get("delay_ms")) or bool(spec.get("same_path_at_zero_delay"))


def relay_key(pair: str, link: str) -> str:
    """The delay relay's process record key."""
    return f"relay-{pair}__{link}"


def relayed(base: Link, index: int, delay_ms: float) -> Link:
    """A delay sweep's point `index` on a real link: the link itself, reached through a
    delay relay on host A (on a loopback address of its own) that holds every byte
    `delay_ms` each way; the point's launch takes its own set of worker ports on B's
    one address. No netem and no root on either host: the relay is a process of A's
    login user (links/relay.py)."""
    name = f"rt{index}"
    link = dataclasses.replace(
        base, name=name, connect_addr=f"127.0.{200 + index}.3",
        ports=dataclasses.replace(base.ports, worker_set=FIRST_POINT_SLOT + index),
        emulation={**base.emulation, "delay": "relay", "delay_ms": delay_ms})
    _start_relay(link, delay_ms, relay_key(link.pair, name))
    return link


def _start_relay(link: Link, delay_ms: float, key: str) -> None:
    mappings = [f"{link.connect_addr}:{port}={link.addr_b}:{port}"
                for port in link.ports.relayed()]
    argv = relay.argv(delay_ms, mappings)
    procs.stop(relay_key(link.pair, link.name))
    # The relay stands for the wire: it lives in A's network namespace but runs on B's
    # CPUs, which idle while B waits for A's commands; on A's it took the CPU from
    # llama-server for every message it read or released (docs/method.md).
    wire = dataclasses.replace(link.host_a, cpus=link.host_b.cpus)
    started = wire.spawn(argv, role="relay", key=relay_key(link.pair, link.name),
                         extra={"pair": link.pair},
                         log_path=procs.state_dir() / "logs" / f"relay-{key}.log")
    link.host_a.wait_listening(link.connect_addr, link.ports.worker(0), timeout=10,
                               server=started)
    link.emulation["relay_argv"] = argv
