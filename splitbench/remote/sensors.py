"""What one host's sensors say now: temperatures, load, NVIDIA GPUs through NVML, and
how busy its CPUs are (and with what).

Standard library only: its source runs as is on any host (locally, in a namespace or
over SSH), once (`python - `) or every N seconds until stopped (`--every N`), printing
one JSON object per reading. `--pids 12,34` adds those processes' CPU time to the
reading: the measurement's own processes, so that the rest is what else ran. With
`--cgroup NAME` those processes (and `--trees`' descendants) are first put into a cgroup
of their own, whose CPU pressure is theirs alone (`own_cgroup`). `--others` adds every
other process's CPU time, to name what else ran.
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
from typing import TypedDict


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


class GpuReading(TypedDict):
    """One NVIDIA GPU's reading (`gpus`); None where NVML could not read it."""

    index: int
    temp_c: int | None
    power_w: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None


def gpus() -> tuple[list[GpuReading], str]:
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


def _gpu(nvml: ctypes.CDLL, index: int) -> GpuReading:
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


def cgroup2_root() -> Path | None:
    """Where the cgroup-v2 hierarchy is mounted (/sys/fs/cgroup on a cgroup-v2 system,
    /sys/fs/cgroup/unified beside cgroup v1), None without one."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields = left.split()
            if right.split()[:1] == ["cgroup2"] and len(fields) > 4 and fields[3] == "/":
                return Path(fields[4])
    return None


def own_cgroup(name: str, pids: list[int], trees: list[int]) -> tuple[str | None, str]:
    """Put `pids`, and `trees` with their living descendants, into the cgroup-v2 group
    `name` at the hierarchy's top (made if missing), so that its cpu.pressure counts
    their waiting for a CPU alone: the measurement's own processes waiting for each
    other, apart from other programs'. A process started by one of them later is born
    inside. (path, what was done) where it worked; (None, why not) otherwise: no
    cgroup v2, no right to make one (needs root), no per-group PSI, or a SLURM job's
    cgroup, whose confinement its processes must not leave."""
    root = cgroup2_root()
    if root is None:
        return None, "no cgroup-v2 hierarchy"
    with contextlib.suppress(OSError):
        mine = [line.split("::", 1)[1] for line in
                Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::")]
        if mine and "slurm" in mine[0]:
            return None, f"inside a SLURM job's cgroup ({mine[0].strip()})"
    path = root / name
    try:
        path.mkdir(exist_ok=True)
        (path / "cpu.pressure").read_text()
    except OSError as error:
        return None, f"no cgroup of its own ({path}: {error.strerror or error})"
    moved = 0
    for pid in sorted(set(pids) | set(_family([], trees))):
        with contextlib.suppress(OSError):  # gone meanwhile, or a kernel thread
            (path / "cgroup.procs").write_text(str(pid))
            moved += 1
    return str(path), f"cgroup {path} ({moved} processes)"


class CpuCounters(TypedDict, total=False):
    """One machine's cumulative CPU counters (`cpu_counters`); None where unreadable."""

    t_mono: float
    hz: int
    ncpu: int | None
    busy_ticks: int | None
    steal_ticks: int | None
    total_ticks: int | None
    psi_some_us: int | None
    own_psi_some_us: int | None
    self_ticks: int  # the reading process's own CPU
    own_ticks: int  # with pids or trees: the measurement's processes' CPU
    own_found: int  # and how many of them were found
    # With --cgroup: what was done (own_cgroup's word) and the cgroup's path; the
    # interference meter sets own_cgroup on a local reading (None: no cgroup asked).
    own_cgroup: str | None
    own_cgroup_path: str | None
    # With others (--others): the other processes' CPU, {"pid:start": [name, ticks]}.
    others: dict[str, list]
    # Read over SSH (--others on a remote host): the sshd processes of the connection the
    # reading came through, {"pid:start": ticks}: the measurement's transport.
    connection: dict[str, int]


def cpu_counters(pids: list[int] | None = None, trees: list[int] | None = None,
                 cgroup: str | None = None, cpus: set[int] | None = None,
                 others: bool = False, connection: bool = False) -> CpuCounters:
    """Cumulative CPU counters: the machine's busy and steal time (/proc/stat, clock
    ticks), the time tasks waited for a CPU (PSI `some` total, us; None where the kernel
    has no PSI), that of the tasks in `cgroup` alone (`own_psi_some_us`, its
    cpu.pressure; own_cgroup) and, for `pids`, their own CPU time including their
    reaped children's; for `trees`, that of their living descendants too. `cpus`: the
    host's CPUs where it is held to some (None: the machine's). `others`: every other
    process's CPU time too (`_others`), to name what else ran; `connection` (a reading
    over SSH): the sshd processes it came through apart (`_connection`)."""
    out: CpuCounters = {"t_mono": time.monotonic(), "hz": os.sysconf("SC_CLK_TCK"),
                        "ncpu": len(cpus) if cpus else os.cpu_count(), "busy_ticks": None,
                        "steal_ticks": None, "total_ticks": None, "psi_some_us": None,
                        "own_psi_some_us": None}
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = _cpu_fields(Path("/proc/stat").read_text(), cpus or set())
        user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
        # Interrupt time is left out: the kernel charges no process for it, so the
        # measurement's own network traffic would count as someone else's work.
        out.update(busy_ticks=user + nice + system, steal_ticks=steal,
                   total_ticks=user + nice + system + idle + iowait + irq + softirq + steal)
    out["psi_some_us"] = _psi_some_us(Path("/proc/pressure/cpu"))
    if cgroup:
        out["own_psi_some_us"] = _psi_some_us(Path(cgroup) / "cpu.pressure")
    with contextlib.suppress(OSError, ValueError, IndexError):
        # This process's own CPU so far (a reader started over SSH: the caller counts it).
        stat = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        out["self_ticks"] = sum(int(v) for v in stat[11:13])
    processes = _processes() if others else None
    if pids is not None or trees:
        ticks = _ticks(pids or [], trees or [], processes)
        out["own_ticks"] = sum(ticks.values())
        # The measurement's processes that were found (descendants come and go: a
        # child's ticks move to its parent's when it ends, so the sum stays whole).
        out["own_found"] = sum(pid in ticks for pid in [*(pids or []), *(trees or [])])
    if processes is not None:
        transport = _connection(processes) if connection else []
        out["connection"] = {f"{pid}:{processes[pid]['start']}": processes[pid]["ticks"]
                             for pid in transport}
        own = {os.getpid(), *(pids or []), *_family([], trees or [], processes), *transport}
        out["others"] = _others(processes, own)
    return out


def _connection(processes: dict[int, _Process], start: int | None = None) -> list[int]:
    """The sshd processes between this process and the SSH server that listens: those of
    the one connection this reading came through (its monitor and session, each an sshd
    whose parent is an sshd). Not the listener, which serves every connection; none
    where this process was not started over SSH."""
    found, pid = [], os.getppid() if start is None else start
    while pid > 1 and pid in processes:
        parent = processes[pid]["parent"]
        if processes[pid]["name"] == "sshd" and processes.get(parent, {}).get("name") == "sshd":
            found.append(pid)
        pid = parent
    return found


def _cpu_fields(stat: str, cpus: set[int]) -> list[int]:
    """/proc/stat's time columns over the CPUs this host's processes may run on: the
    whole machine's line, or, where the host is held to some of its CPUs (a cpuset, a
    taskset: a test's second machine on one computer), the sum of those CPUs' lines, so
    that work on the other CPUs is not counted as this host's."""
    lines = [line.split() for line in stat.splitlines() if line.startswith("cpu")]
    per_cpu = {int(f[0][3:]): [int(v) for v in f[1:]] for f in lines[1:]}
    if not cpus or set(per_cpu) <= cpus:
        return [int(v) for v in lines[0][1:]]
    chosen = [per_cpu[cpu] for cpu in sorted(cpus) if cpu in per_cpu]
    return [sum(column) for column in zip(*chosen)]  # noqa: B905 (B may run Python 3.8)


def _psi_some_us(path: Path) -> int | None:
    """A pressure file's `some` total (us), None where unreadable."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(path.read_text().split("\n")[0].rsplit("total=", 1)[1])
    return None


class _Process(TypedDict):
    name: str  # the kernel's name for it (/proc/PID/stat's comm)
    start: int  # when it started (clock ticks since boot): a reused pid is another
    ticks: int  # utime, stime, cutime, cstime: its CPU and its reaped children's
    own_ticks: int  # utime, stime: its CPU alone
    parent: int


def _processes() -> dict[int, _Process]:
    """Every process on this host now (one pass over /proc)."""
    found: dict[int, _Process] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            # Fields after the name (which may hold spaces): state, ppid, ...; utime,
            # stime, cutime, cstime are fields 14-17, starttime field 22.
            text = (entry / "stat").read_text()
            name = text[text.index("(") + 1:text.rindex(")")]
            stat = text.rsplit(")", 1)[1].split()
            found[int(entry.name)] = {"name": name, "start": int(stat[19]),
                                      "ticks": sum(int(v) for v in stat[11:15]),
                                      "own_ticks": int(stat[11]) + int(stat[12]),
                                      "parent": int(stat[1])}
    return found


def _family(pids: list[int], trees: list[int],
            processes: dict[int, _Process] | None = None) -> dict[int, int]:
    """CPU ticks (utime, stime, cutime, cstime) of `pids`, and of `trees` with every
    living descendant of theirs."""
    processes = _processes() if processes is None else processes
    children: dict[int, list[int]] = {}
    for pid, process in processes.items():
        children.setdefault(process["parent"], []).append(pid)
    family = {pid: processes[pid]["ticks"] for pid in pids if pid in processes}
    todo = [p for p in trees if p in processes]
    while todo:
        pid = todo.pop()
        if pid not in family:
            family[pid] = processes[pid]["ticks"]
            todo += children.get(pid, [])
    return family


def _others(processes: dict[int, _Process], own: set[int]) -> dict[str, list]:
    """The CPU ticks of every process that is not `own` and has used any, keyed by pid
    and start time (a pid reused between two readings is another process): [name,
    ticks]. Two readings' difference says which programs did the work that was not
    the measurement's. Its own ticks only: a process that reaps a child gains the
    child's whole life's CPU at once (init reaping an orphan read as 11.9 cores on a
    2-core machine), which is no work it did between the readings."""
    return {f"{pid}:{p['start']}": [p["name"], p["own_ticks"]]
            for pid, p in processes.items() if pid not in own and p["own_ticks"] > 0}


def _ticks(pids: list[int], trees: list[int],
           processes: dict[int, _Process] | None = None) -> dict[int, int]:
    """CPU ticks (utime, stime, cutime, cstime) of `pids`, and of `trees` with every
    living descendant of theirs: a server that runs its work in child processes (vLLM's
    engine and workers) is the measurement's own, not another program's."""
    if not trees and processes is None:
        return {pid: t for pid in pids if (t := _own_ticks(pid)) is not None}
    return _family(pids, trees, processes)


def _own_ticks(pid: int) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        # utime, stime, cutime, cstime: fields 14-17; the name may hold spaces.
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(v) for v in stat[11:15])
    return None


class Reading(TypedDict, total=False):
    """One reading (`reading`; a line of --every's); a gap's stand-in lacks t and cpu."""

    t: float
    temp_max_c: float | None
    temp_sources: str
    load1: float | None
    gpus: list[GpuReading]
    gpu_sources: str
    cpu: CpuCounters


def reading(pids: list[int] | None = None, trees: list[int] | None = None,
            cgroup: str | None = None, cpus: set[int] | None = None,
            others: bool = False) -> Reading:
    """One reading; `others` (a reading over SSH): every other process's CPU, and the
    connection's own sshd processes apart."""
    temps = temperatures_c()
    gpu_list, gpu_found = gpus()
    return {
        "t": time.time(),
        "temp_max_c": max(temps.values()) if temps else None,
        "temp_sources": ",".join(sorted(temps)) or "none found",
        "load1": os.getloadavg()[0],
        "gpus": gpu_list,
        "gpu_sources": gpu_found,
        "cpu": cpu_counters(pids, trees, cgroup, cpus, others, connection=others),
    }


def main(argv: list[str]) -> None:
    every = float(argv[argv.index("--every") + 1]) if "--every" in argv else None
    pids = ([int(p) for p in argv[argv.index("--pids") + 1].split(",") if p]
            if "--pids" in argv else None)
    trees = ([int(p) for p in argv[argv.index("--trees") + 1].split(",") if p]
             if "--trees" in argv else None)
    cgroup, done = (own_cgroup(argv[argv.index("--cgroup") + 1], pids or [], trees or [])
                    if "--cgroup" in argv else (None, None))
    parent = os.getppid()
    # A sampler outlives nothing: when its parent (the cell job, or the SSH session)
    # is gone, killed say, it stops instead of sampling forever.
    while os.getppid() == parent:
        # Read on the host itself (over SSH): the CPUs its processes may run on.
        found = reading(pids, trees, cgroup, os.sched_getaffinity(0), "--others" in argv)
        if done:
            found["cpu"].update(own_cgroup=done, own_cgroup_path=cgroup)
        print(json.dumps(found), flush=True)
        if every is None:
            return
        time.sleep(every)


if __name__ == "__main__":
    main(sys.argv[1:])
