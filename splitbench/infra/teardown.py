"""Stop what a run started, and only that: every recorded process (by pid, checked
against its start time, so a reused pid is never hit), every recorded namespace, every
recorded change to a host (undone by its own recorded command); then the records a
cancelled cluster job left behind. Also the `teardown` command, for a person."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from splitbench.infra import leftovers, procs, remote_pids


def _undo_changes() -> list[str]:
    """Undo every recorded change; one whose host cannot be reached, or whose undo
    fails, stays on record for the next teardown."""
    done = []
    records = [(path, procs.read_record(path))
               for path in procs.records_dir("changes").glob("*.json")]
    for path, record in sorted(records, key=_undo_order):
        if record is None:  # torn: nothing to run
            path.unlink(missing_ok=True)
            continue
        what = f"{' '.join(record['undo'][-5:])} on host {record['host']}"
        if record.get("remote"):
            result = remote_pids.remote_run(record["remote"], record["undo"])
        else:
            if record.get("cgroup"):
                _leave(Path(record["cgroup"]))  # this process may be inside it
            result = subprocess.run(record["undo"], capture_output=True, text=True)
        if result is None:
            done.append(f"could not reach host {record['host']} to run {what}: kept on "
                        "record, the next teardown tries again")
        elif result.returncode == 0 or any(gone in result.stderr for gone in (
                [record["gone_if"]] if isinstance(record["gone_if"], str)
                else record["gone_if"])):
            path.unlink(missing_ok=True)
            done.append(f"ran {what}")
        else:
            done.append(f"could not run {what}: {result.stderr.strip()}")
    return done


def _undo_order(path_record: tuple[Path, Any]) -> tuple[bool, bool, str]:
    """Remote hosts' changes first: a change here (the link's address on host A) may be
    the path to them. On each, the run's guard table before the interface changes it
    names: an interface change two runs share is undone by a run only where no other
    run's table names it (guard.shared_undo), so each run drops its own table before it
    looks. Two runs ending at once then cannot both find the other's table still there
    and both leave the change in place: whichever looks last finds none."""
    path, record = path_record
    return (not (record or {}).get("remote"), "table" not in (record or {}), path.name)


def _leave(cgroup: Path) -> None:
    """Move this process out of `cgroup` into its parent, where it is inside (a process
    that measured in-process, a test, and now tears down): else it holds it open."""
    with contextlib.suppress(OSError, ValueError):
        mine = [line.split("::", 1)[1].strip() for line in
                Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::")]
        if mine and cgroup.as_posix().endswith(mine[0]) and mine[0] != "/":
            (cgroup.parent / "cgroup.procs").write_text(str(os.getpid()))


def teardown(namespaces_first: bool = False, spare: Sequence[str] = ()) -> list[str]:
    """Stop every recorded process, delete every recorded namespace. Returns what it did.

    namespaces_first: when time is short (the reaper is asked to end), remove the
    namespaces before waiting on anyone. spare: keys of records to leave alone.
    """
    done = _delete_namespaces() if namespaces_first else []
    # The measuring jobs first, then each launch (its servers in their order, then the
    # files they left: scratch directories, /dev/shm), then whatever else is recorded.
    done += _stop([r for r in procs.all_procs() if r.get("role") == "job"], spare)
    done += leftovers.stop_all(spare)
    done += _stop([r for r in procs.all_procs() if r.get("role") != "job"], spare)
    done += _delete_namespaces()
    done += _undo_changes()
    for path in procs.records_dir("links").glob("*.json"):
        path.unlink()
    if not os.environ.get("SLURM_JOB_ID"):
        done += sweep_ended_jobs()
    return done


def _stop(records: list[procs.ProcRecord], spare: Sequence[str]) -> list[str]:
    """Stop these recorded processes in STOP_ORDER, but those keyed in `spare`."""
    done = []
    for record in sorted(records, key=procs.stop_rank):
        if record["key"] in spare:
            continue
        if procs.unreachable(record):
            done.append(f"could not reach host {record.get('host')} to stop "
                        f"{record['role']} pid {record['pid']}: kept on record, the next "
                        "teardown tries again")
            continue
        if record["pid"] != os.getpid():  # the reaper does not stop itself
            alive = procs.is_alive(record)
            try:
                procs.terminate(record, timeout=10.0)
            except procs.HostUnreachable:
                done.append(f"lost host {record.get('host')} while stopping "
                            f"{record['role']} pid {record['pid']}: kept on record, the "
                            "next teardown tries again")
                continue
            if alive:
                done.append(f"stopped {record['role']} pid {record['pid']}")
        procs.forget_process(record)
    return done


# The folders of records a run keeps (procs, namespaces, changes, links, launches),
# emptied by a teardown; logs beside them are kept.
RECORD_KINDS = ("procs", "netns", "changes", "links", "servers")


def sweep_ended_jobs(running: Callable[[str], bool | None] | None = None) -> list[str]:
    """Tear down what each ended cluster job left on record (state_dir()/slurm-<job>: a job
    cancelled while host B could not be reached keeps its workers there, and no later
    job reads that folder), then remove its emptied record folders (rmdir: only an empty
    one goes). A job SLURM still lists, or whose state it cannot tell, is left alone.
    `running`: job id -> True, False, or None for unknown (default: squeue)."""
    done = []
    for folder in sorted(procs.state_dir().glob("slurm-*")):
        job = folder.name.removeprefix("slurm-")
        if not job.isdigit() or (running or _job_running)(job) is not False:
            continue
        with _state_at(folder):
            done += [f"job {job}: {line}" for line in teardown()]
        for kind in RECORD_KINDS:
            with contextlib.suppress(OSError):
                (folder / kind).rmdir()
    return done


def _job_running(job: str) -> bool | None:
    try:
        listed = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i"], capture_output=True,
                                text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        # squeue refuses a job id it no longer knows; anything else is not knowing.
        return False if "Invalid job id" in listed.stderr else None
    return bool(listed.stdout.strip())


@contextlib.contextmanager
def _state_at(folder: Path) -> Iterator[None]:
    """state_dir() is `folder` inside the block (a job's records, read from outside it)."""
    before = os.environ.get("SPLITBENCH_STATE")
    os.environ["SPLITBENCH_STATE"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SPLITBENCH_STATE", None)
        else:
            os.environ["SPLITBENCH_STATE"] = before


def _delete_namespaces() -> list[str]:
    done = []
    for name in procs.namespaces():
        # Deleting a namespace also deletes the veth ends and qdiscs inside it.
        result = subprocess.run(
            ["ip", "netns", "delete", name], capture_output=True, text=True
        )
        if result.returncode == 0:
            done.append(f"deleted namespace {name}")
        elif name in _listed_namespaces():
            # Kept on record: the next teardown (the reaper's, a later run's) tries again.
            done.append(f"could not delete namespace {name}: {result.stderr.strip()}")
            continue
        procs.forget("netns", name)
    return done


def _listed_namespaces() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.split()]
