"""Is a pair's pair of hosts ready: the checks of host A and host B that need no link
and no model (their tools, B reached over SSH with a known host key, B's Python, the
ports splitbench serves on, the clocks, the wake-up latency).

`python -m splitbench doctor` prints them with the rest of its checks; the toolchain
stage, each pair's first job in `snakemake all`, makes them again before it records the
pair's builds, and a ✗ there is the pair's result (its blocks are not launched).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from splitbench.contracts.slices import HostsSlice
from splitbench.infra import privilege
from splitbench.infra.hosts import Host, HostError, host_from_spec
from splitbench.links import ports

OK, BAD, NOTE = "✓", "✗", "·"

# What each host of a real pair runs (docs/two-machines.md, "What each host needs").
TOOLS_A = ("ip", "ping", "iperf3", "ss", "sha256sum")
TOOLS_B = ("ip", "ping", "iperf3", "ss", "sha256sum", "setsid", "mktemp", "flock")
TOOLS_EMBEDDED = ("ip", "ping", "iperf3", "ss", "taskset", "cc")


# The note that stands for host B's checks where B could not be reached.
NOT_REACHED = "host B's other checks not run"


@dataclass(frozen=True)
class Line:
    mark: str
    pair: str
    text: str
    fix: str = ""

    def __str__(self) -> str:
        return f"{self.mark} {self.pair}: {self.text}" + (f" — {self.fix}" if self.fix else "")


def pair_hosts(pair: str, hosts_spec: HostsSlice) -> list[Line]:
    """Both hosts' lines: one local host for the embedded lab; for a real pair host A's
    tools, then host B reached over SSH and, if it is, B's tools, Python, free ports,
    the clocks and each host's wake-up latency."""
    host_a = host_from_spec("a", hosts_spec["a"])
    host_b = host_from_spec("b", hosts_spec["b"])
    if not host_b.ssh:
        return tools(host_a, pair, TOOLS_EMBEDDED)
    lines = [*tools(host_a, pair, TOOLS_A), packet_socket(pair)]
    try:
        host_b.run(["true"], timeout=30)
    except HostError as exc:
        return [*lines, Line(BAD, pair, f"host B ({host_b.ssh}) cannot be reached: {exc}",
                             "see docs/two-machines.md (SSH and host keys)"),
                Line(NOTE, pair, NOT_REACHED)]
    lines.append(Line(OK, pair, f"host B reached over SSH ({host_b.ssh}), its host key "
                                "known"))
    lines += tools(host_b, pair, TOOLS_B)
    lines += [python(host_b, pair), ports_free(host_a, host_b, pair),
              clock(host_a, host_b, pair)]
    return lines + [wakeup(host, pair) for host in (host_a, host_b)]


def reached(lines: list[Line]) -> bool:
    """Whether pair_hosts reached host B (or had no B to reach)."""
    return not any(line.text == NOT_REACHED for line in lines)


def failures(lines: list[Line]) -> list[Line]:
    return [line for line in lines if line.mark == BAD]


def tools(host: Host, pair: str, wanted: tuple[str, ...]) -> list[Line]:
    missing = host.missing_tools(wanted)
    if not missing:
        return [Line(OK, pair, f"host {host.name.upper()} has {', '.join(wanted)}")]
    return [Line(BAD, pair, f"host {host.name.upper()} has no {tool}",
                 f"install it there (Debian: apt-get install {_package(tool)})")
            for tool in missing]


def _package(tool: str) -> str:
    return {"ip": "iproute2", "ss": "iproute2", "ping": "iputils-ping", "nft": "nftables",
            "sha256sum": "coreutils", "mktemp": "coreutils", "setsid": "util-linux",
            "flock": "util-linux", "taskset": "util-linux", "cc": "gcc"}.get(tool, tool)


def python(host: Host, pair: str) -> Line:
    done = host.run([host.python, "-c", "import sys; print(sys.version_info >= (3, 8))"],
                    check=False)
    if done.stdout.strip() == "True":
        return Line(OK, pair, f"host B's {host.python} is Python 3.8 or later")
    return Line(BAD, pair, f"host B has no Python 3.8 or later at {host.python}",
                "install python3 there, or set hosts.b.python to one")


def ports_free(host_a: Host, host_b: Host, pair: str) -> Line:
    """The block of ports this run's servers would take (links/ports.py): one where
    neither host listens, outside both hosts' ephemeral ranges."""
    block = ports.free_block([host_a, host_b])
    if block is None:
        why, _, fix = ports.why_none_free([host_a, host_b]).partition("; ")
        return Line(BAD, pair, why, fix)
    return Line(OK, pair, f"ports {block.base}-{block.last} are free on both hosts for "
                          "this run's servers, outside their ephemeral port ranges")


def clock(host_a: Host, host_b: Host, pair: str) -> Line:
    before = time.time()
    remote = float(host_b.run(["date", "+%s.%N"]).stdout.strip())
    offset = remote - (before + time.time()) / 2
    return Line(NOTE, pair, f"host B's clock is {offset:+.3f} s from host A's (every figure "
                            "is timed on host A; B's clock only dates its log lines)")


def packet_socket(pair: str) -> Line:
    """Whether host A (this process) has a packet socket: its own as root, the packet
    helper's (infra/packet_helper.py), or none, and what a run measures without it."""
    from splitbench.infra import packet_helper, packets

    if os.geteuid() == 0:
        how = "its own (root)"
    else:
        sock = packets.own_socket() or packets.helper_socket(packets.KEEP_NOTHING, 0)
        if sock is None:
            return Line(NOTE, pair, "host A: no packet socket (not root, no packet helper): "
                        "each token is stamped when it is read, and round trips per token "
                        "are not counted (the findings take the floor, said to be assumed)",
                        ".venv/bin/python -m splitbench packet-helper (prints what root "
                        "runs to install it for you)")
        sock.close()
        how = f"the packet helper's ({packet_helper.path()})"
    return Line(OK, pair, f"host A has a packet socket, {how}: tokens stamped as their "
                          "segments arrive, round trips per token counted from the packets")


def wakeup(host: Host, pair: str) -> Line:
    held = host.run(["test", "-w", "/dev/cpu_dma_latency"], check=False).returncode == 0 \
        or privilege.through_helper(host) or privilege.sudo_allows(host, privilege.FOR_WAKEUP)
    governor = host.run(["cat", "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"],
                        check=False).stdout.strip() or "not reported"
    side = host.name.upper()
    how = "can be held at 0 us" if held else "cannot be held (not root, no root helper)"
    return Line(NOTE, pair, f"host {side}: CPU wake-up latency {how}, governor {governor}")
