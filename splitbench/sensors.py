"""What one host's sensors say now: temperatures, load, and NVIDIA GPUs through NVML.

Standard library only: its source runs as is on any host (locally, in a namespace or
over SSH), once (`python - `) or every N seconds until stopped (`--every N`), printing
one JSON object per reading.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import json
import os
import sys
import time
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


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


def gpus() -> tuple[list[dict[str, Any]], str]:
    """Per-GPU temperature (C), power (W) and memory (MiB) from NVML, and what was found."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return [], "no NVML (libnvidia-ml.so.1 not found)"
    if nvml.nvmlInit_v2() != 0:
        return [], "NVML present but nvmlInit failed"
    try:
        count = ctypes.c_uint()
        nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
        return [_gpu(nvml, i) for i in range(count.value)], f"NVML: {count.value} GPU(s)"
    finally:
        nvml.nvmlShutdown()


def _gpu(nvml: ctypes.CDLL, index: int) -> dict[str, Any]:
    handle = ctypes.c_void_p()
    nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle))
    temp, milliwatts, memory = ctypes.c_uint(), ctypes.c_uint(), _Memory()
    ok_temp = nvml.nvmlDeviceGetTemperature(handle, 0, ctypes.byref(temp)) == 0  # 0: GPU die
    ok_power = nvml.nvmlDeviceGetPowerUsage(handle, ctypes.byref(milliwatts)) == 0
    ok_memory = nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) == 0
    return {
        "index": index,
        "temp_c": temp.value if ok_temp else None,
        "power_w": milliwatts.value / 1000 if ok_power else None,
        "memory_used_mib": memory.used / 2**20 if ok_memory else None,
        "memory_total_mib": memory.total / 2**20 if ok_memory else None,
    }


def reading() -> dict[str, Any]:
    temps = temperatures_c()
    gpu_list, gpu_found = gpus()
    return {
        "t": time.time(),
        "temp_max_c": max(temps.values()) if temps else None,
        "temp_sources": ",".join(sorted(temps)) or "none found",
        "load1": os.getloadavg()[0],
        "gpus": gpu_list,
        "gpu_sources": gpu_found,
    }


def main(argv: list[str]) -> None:
    every = float(argv[argv.index("--every") + 1]) if "--every" in argv else None
    parent = os.getppid()
    # A sampler outlives nothing: when its parent (the cell job, or the SSH session)
    # is gone, killed say, it stops instead of sampling forever.
    while os.getppid() == parent:
        print(json.dumps(reading()), flush=True)
        if every is None:
            return
        time.sleep(every)


if __name__ == "__main__":
    main(sys.argv[1:])
