"""Temperatures and load around a cell: whatever this host exposes, and what was found."""

from __future__ import annotations

import contextlib
import glob
import os
from pathlib import Path
from typing import Any


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
