"""What this machine's GPU library says, asked directly: what a reading of it must give."""

from __future__ import annotations

import ctypes


def nvml_says() -> tuple[str, int]:
    """What NVML says on this machine, asked here directly: the text a reading must give
    and the number of GPUs."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return "no NVML (libnvidia-ml.so.1 not found)", 0
    if nvml.nvmlInit_v2() != 0:
        return "NVML present but nvmlInit failed", 0
    try:
        count = ctypes.c_uint()
        assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
        return f"NVML: {count.value} GPU(s)", count.value
    finally:
        nvml.nvmlShutdown()
