"""The reaper: a small process that watches a run (its Snakemake process, or a pair's
cluster job) and tears down what the run started once it is gone, whether it ended
normally, on Ctrl-C or by kill -9."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from splitbench.infra import proc_stat, procs, teardown


def start_reaper(owner_pid: int, locks: Sequence[str] = ()) -> None:
    """Watch owner_pid; tear the run down when it is gone (also after kill -9).

    locks: the owner's Snakemake directory locks. A killed Snakemake leaves them behind
    and the next run would refuse to start; the reaper removes exactly these files.
    """
    log = procs.state_dir() / "reaper.log"
    procs.spawn(
        [sys.executable, "-m", "splitbench.infra.reaper", "reaper", str(owner_pid),
         *(str(Path(lock).resolve()) for lock in locks)],
        role="reaper",
        key=f"reaper-{owner_pid}",
        log_path=log,
        env={"SPLITBENCH_STATE": str(procs.state_dir())},
    )


class _Ended(Exception):
    """SIGTERM or SIGHUP: the reaper itself is being stopped."""


def _on_stop(signum: int, frame: Any) -> None:
    raise _Ended


def _reap_when_gone(owner_pid: int, locks: list[str], key: str | None = None) -> None:
    owner = {"pid": owner_pid, "start_time": proc_stat.start_time(owner_pid)}
    me = key or f"reaper-{owner_pid}"
    if key:
        for line in leave_job_cgroups():
            print(line, flush=True)
    signal.signal(signal.SIGTERM, _on_stop)
    signal.signal(signal.SIGHUP, _on_stop)
    stopped = False
    try:
        while procs.is_alive(owner):
            if procs.find(me) is None:  # the run tore down normally and forgot us
                return
            time.sleep(0.5)
    except _Ended:
        stopped = True
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"{'stopped' if stopped else f'pid {owner_pid} is gone'}: tearing down",
          flush=True)
    for line in teardown.teardown(namespaces_first=stopped):
        print(line, flush=True)
    for lock in locks:
        with contextlib.suppress(FileNotFoundError):
            Path(lock).unlink()
            print(f"removed stale Snakemake lock {lock}", flush=True)


def end_of_job() -> None:
    """At the end of a pair's cluster job, before SLURM kills what is left of it: stop
    the servers (also host B's, over SSH) and delete the namespaces the job started.
    Then the job's reaper is told to stand down."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return
    # The reaper stands down only after the teardown: SLURM may kill this process
    # mid-way (a cancel), and then the reaper, outside the job, finishes it.
    reaper = f"reaper-slurm-{job}"
    for line in teardown.teardown(spare=[reaper]):
        print(f"splitbench: {line}", file=sys.stderr, flush=True)
    procs.forget("procs", reaper)


def leave_job_cgroups() -> list[str]:
    """Move this process out of the SLURM job's cgroups, to where slurmd runs.

    Cancelling a job (Ctrl-C on Snakemake cancels the pair jobs) kills every process in
    its cgroups at once with SIGKILL: no handler runs. The servers die with the job, but
    its namespaces (kernel objects, not processes) and host B's workers (another
    machine) do not. So the job's reaper, a small watcher that lives only until the
    job's batch script is gone and the pair is torn down, stands outside the job. Needs
    root; without it the reaper stays inside and says so in its log."""
    done = []
    mounts = _cgroup_mounts()
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        parts = path.strip("/").split("/")
        inside = [i for i, part in enumerate(parts) if part.startswith("slurm")]
        mount = mounts.get(controllers)
        if not inside or mount is None:
            continue
        target = mount.joinpath(*parts[:inside[0]]) / "cgroup.procs"
        try:
            target.write_text(str(os.getpid()))
            done.append(f"left the job's cgroup {controllers or 'v2'}:{path}")
        except OSError as error:
            done.append(f"stays in the job's cgroup {controllers or 'v2'}:{path} ({error}): "
                        "a cancelled job leaves its namespaces and host B's workers")
    return done


def _cgroup_mounts() -> dict[str, Path]:
    """Each cgroup hierarchy's mount point (of its root), keyed as /proc/self/cgroup
    names it: "freezer", "cpu,cpuacct", "name=systemd", "" for cgroup v2."""
    mounts: dict[str, Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, after = left.split(), right.split()
        if len(fields) < 5 or len(after) < 3 or fields[3] != "/":
            continue
        if after[0] == "cgroup2":
            mounts[""] = Path(fields[4])
        elif after[0] == "cgroup":
            options = [o for o in after[2].split(",") if o not in ("rw", "ro")]
            known = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio",
                     "pids", "net_cls", "net_prio", "perf_event", "hugetlb", "rdma",
                     "misc")
            names = [o for o in options if o in known or o.startswith("name=")]
            mounts[",".join(names)] = Path(fields[4])
    return mounts


if __name__ == "__main__":
    if sys.argv[1:2] == ["reaper"]:
        _reap_when_gone(int(sys.argv[2]), sys.argv[3:])
    elif sys.argv[1:2] == ["job-reaper"]:
        _reap_when_gone(int(sys.argv[2]), [], key=sys.argv[3])
