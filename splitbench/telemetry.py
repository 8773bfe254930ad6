"""Around a cell: temperatures and load (whatever this host exposes, and what was found),
and the bytes that crossed the link on the RPC connection (kernel TCP counters)."""

from __future__ import annotations

import contextlib
import glob
import os
import re
from pathlib import Path
from typing import Any

from splitbench.hosts import Host


def temperatures_c(sysfs: str = "/sys") -> dict[str, float]:
    """Every readable thermal zone and hwmon sensor, in degrees Celsius."""
    found: dict[str, float] = {}
    for path in glob.glob(f"{sysfs}/class/thermal/thermal_zone*/temp"):
        _read_milli(path, f"thermal:{Path(path).parent.name}", found)
    for path in glob.glob(f"{sysfs}/class/hwmon/hwmon*/temp*_input"):
        _read_milli(path, f"hwmon:{Path(path).parent.name}:{Path(path).name}", found)
    return found


def _read_milli(path: str, name: str, out: dict[str, float]) -> None:
    with contextlib.suppress(OSError, ValueError):
        out[name] = int(Path(path).read_text().strip()) / 1000


def snapshot() -> dict[str, Any]:
    temps = temperatures_c()
    return {
        "temp_max_c": max(temps.values()) if temps else None,
        "temp_sources": ",".join(sorted(temps)) or "none found",
        "load1": os.getloadavg()[0],
    }


COUNTERS = ("bytes_sent", "bytes_received", "data_segs_out", "data_segs_in")


def parse_ss(text: str) -> dict[str, int]:
    """Sum the kernel's per-socket TCP counters in `ss -tin` output (absent means 0)."""
    totals = dict.fromkeys(COUNTERS, 0)
    for name in COUNTERS:
        for value in re.findall(rf"\b{name}:(\d+)", text):
            totals[name] += int(value)
    return totals


def rpc_counters(host: Host, addr: str, port: int) -> dict[str, int] | None:
    """TCP counters of host's connections to the RPC worker at addr:port (A's view:
    sent = A to B, received = B to A)."""
    result = host.run(["ss", "-tinH", "dst", f"{addr}:{port}"], check=False)
    return parse_ss(result.stdout) if result.returncode == 0 else None


def traffic(before: dict | None, after: dict | None) -> dict[str, int | None]:
    """Bytes and data segments that crossed the RPC connection between two snapshots."""
    if before is None or after is None:
        return {"a_to_b_bytes": None, "b_to_a_bytes": None, "a_to_b_segs": None,
                "b_to_a_segs": None}
    return {
        "a_to_b_bytes": after["bytes_sent"] - before["bytes_sent"],
        "b_to_a_bytes": after["bytes_received"] - before["bytes_received"],
        "a_to_b_segs": after["data_segs_out"] - before["data_segs_out"],
        "b_to_a_segs": after["data_segs_in"] - before["data_segs_in"],
    }
