"""Processes and namespaces a run starts, recorded so that exactly those are stopped.

A run's long-lived parts (RPC workers, llama-servers, delay relays, namespaces) outlive
the Snakemake job that started them: the next cell job reuses them. Each is recorded as
a small JSON file under the state directory; this module starts, records, finds and
stops them. `teardown.py` stops everything recorded; `reaper.py` watches a run and tears
it down when it is gone.

In a pair's cluster job (SLURM_JOB_ID set) the records live in a directory of the job's
own, since on a shared filesystem another node's pids are not this node's, and a job
reaper on the node (started here, with the job's first record) tears the pair down when
the job ends or is cancelled.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pwd
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from splitbench.errors import SplitbenchError
from splitbench.infra import files, proc_stat, remote_pids
from splitbench.infra.polling import poll_until
from splitbench.infra.remote_pids import HostUnreachable

if TYPE_CHECKING:  # paramiko loads only where a host is remote
    from splitbench.infra.ssh import SSHSettings

# Stop order, by a record's `stops` (what a backend's process is to the others) or else
# its role: a measuring job first (after Snakemake is killed, its jobs run on as
# orphans); then a launch's front end, which the client calls, before the workers it
# calls (a worker that goes first makes its front end abort mid-call); then the link's
# own tools; anything else last.
STOP_ORDER = ("job", "front", "worker", "relay", "probe", "iperf3", "other")


def stop_rank(record: ProcRecord) -> int:
    """Where a recorded process comes in STOP_ORDER (unknown: after every other)."""
    stage = record.get("stops") or record.get("role")
    return STOP_ORDER.index(stage) if stage in STOP_ORDER else len(STOP_ORDER)


class ProcRecord(TypedDict, total=False):
    """A started process's record (procs/<key>.json): `spawn`'s keys, `extra`'s after."""

    pid: int
    start_time: int | None  # clock ticks since boot (`start_time`); None: unknown
    role: str  # "job", "reaper", "relay", ..., or a backend's ("llama-server", ...)
    stops: str  # a backend's process: "front" (the client calls it) or "worker"
    key: str
    argv: list[str]
    log: str  # the log's path; a remote one's as "destination:path"
    remote: SSHSettings | list[str]  # its SSH host (a list: an older record's ssh argv)
    remote_log: str  # a remote process's log on its host (removed when forgotten)
    host: str  # the Host's name ("a", "b", "local")
    stage: str  # a job's stage
    pair: str  # the pair a server, relay or measuring process belongs to
    group: bool  # stopped as a process group (a server that starts its own workers)


class ChangeRecord(TypedDict, total=False):
    """A change to a host and its undo (changes/<key>.json, `record_change`)."""

    host: str  # the Host's name
    remote: SSHSettings | None  # its SSH host; None: this machine
    undo: list[str]
    gone_if: str | list[str]
    # The state its maker keeps: a cgroup's path (`record_cgroup`), or the link guard's
    # interfaces and addresses (links/guard.py).
    cgroup: str
    interfaces: list[str]
    addresses: list[str]


def state_dir() -> Path:
    base = Path(os.environ.get("SPLITBENCH_STATE", ".splitbench")).resolve()
    job = os.environ.get("SLURM_JOB_ID")
    if job and base.name != f"slurm-{job}":
        return base / f"slurm-{job}"
    return base


class StateError(SplitbenchError):
    """The state directory or one of its records is another user's."""


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def check_owned(path: Path) -> None:
    """Refuse a state directory or record (the link itself, if it is one) that is not
    the effective user's: teardown, perhaps as root, runs the commands records hold."""
    owner = path.lstat().st_uid
    if owner != os.geteuid():
        raise StateError(
            f"{path} belongs to {_owner(owner)}, not to {_owner(os.geteuid())}, who runs "
            "splitbench: its records are not acted on. Run as its owner, or remove it if "
            "no run of that user's is in it")


def _private(path: Path) -> Path:
    """`path` as a directory only its owner, this user, can enter (mode 0700): no other
    user can put a record there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    check_owned(path)
    if stat.S_IMODE(path.lstat().st_mode) != 0o700:
        path.chmod(0o700)  # made by an earlier version with the default umask
    return path


def private_state_dir() -> Path:
    """The state directory, made (or narrowed to) mode 0700 and checked to be ours."""
    base = Path(os.environ.get("SPLITBENCH_STATE", ".splitbench")).resolve()
    folder = state_dir()
    if folder != base:
        _private(base)
    return _private(folder)


def records_dir(kind: str) -> Path:
    return _private(private_state_dir() / kind)


def read_record(path: Path) -> Any | None:
    """A record's JSON (None when it is missing or torn); StateError when another user
    owns it."""
    try:
        check_owned(path)
    except FileNotFoundError:
        return None
    return files.read_json(path)


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """An exclusive lock shared by every process of this run (file lock)."""
    path = private_state_dir() / f"{name}.lock"
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def is_alive(record: ProcRecord, *, strict: bool = False) -> bool:
    """Running, and the same process that was recorded (not a reused pid, not a zombie).
    strict: a remote host that cannot be reached raises HostUnreachable (else: not
    alive)."""
    pid = record["pid"]
    if record.get("start_time") is None:  # which process it was cannot be told
        return False
    if record.get("remote"):
        return remote_pids.start_time(record["remote"], pid, strict=strict) == record["start_time"]
    return proc_stat.start_time(pid) == record["start_time"] and not proc_stat.is_zombie(pid)


def _signal(record: ProcRecord, sig: signal.Signals) -> None:
    """Signal the process, or its whole process group where the record says `group`
    (a server that starts its own workers: each was started in a session of its own, so
    its group is its own and its children's). HostUnreachable: its host did not answer.
    A remote one only while its pid is still the recorded process (remote_pids.signal)."""
    pid = int(record["pid"])
    if record.get("remote"):
        remote_pids.signal(record["remote"], pid, record.get("start_time"), sig,
                           bool(record.get("group")))
        return
    with contextlib.suppress(ProcessLookupError):
        if record.get("group"):
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


# The processes this one started, kept referenced: a Popen that Python collects reaps its
# child if it has already ended, and its exit status ("exited with code 1") is then lost
# to `exit_status`.
_CHILDREN: dict[int, subprocess.Popen] = {}


def spawn(
    argv: Sequence[str],
    *,
    role: str,
    key: str,
    log_path: Path,
    env: dict[str, str] | None = None,
    extra: ProcRecord | None = None,
) -> ProcRecord:
    """Start a detached process (own session, outlives the caller) and record it."""
    if role != "reaper":
        ensure_job_reaper()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    _CHILDREN[proc.pid] = proc
    # The kernel fills /proc/PID/stat at fork, so the start time is readable at once.
    record: ProcRecord = {
        "pid": proc.pid,
        "start_time": proc_stat.start_time(proc.pid),
        "role": role,
        "key": key,
        "argv": list(argv),
        "log": str(log_path),
        **(extra or {}),
    }
    return record_process(record)


def forget(kind: str, key: str) -> None:
    """Drop a record (a process or namespace that is gone)."""
    with contextlib.suppress(FileNotFoundError):
        (records_dir(kind) / f"{key}.json").unlink()


def record_process(record: ProcRecord) -> ProcRecord:
    """Remember a started process (local or remote) so teardown can stop it."""
    _write(records_dir("procs") / f"{record['key']}.json", record)
    return record


@contextlib.contextmanager
def job(stage: str) -> Iterator[None]:
    """Record this process as a running job of the run, so that the reaper stops it when
    Snakemake is killed (an orphan would measure on against torn-down servers)."""
    key = f"job-{os.getpid()}"
    record_process({"pid": os.getpid(), "start_time": proc_stat.start_time(os.getpid()),
                    "role": "job", "key": key, "argv": sys.argv, "stage": stage})
    try:
        yield
    finally:
        forget("procs", key)


def _write(path: Path, data: ProcRecord | ChangeRecord | dict[str, str]) -> None:
    files.write_json(path, data)


def find(key: str) -> ProcRecord | None:
    return read_record(records_dir("procs") / f"{key}.json")


def all_procs() -> list[ProcRecord]:
    return [record for path in sorted(records_dir("procs").glob("*.json"))
            if (record := read_record(path)) is not None]


def stop(key: str, timeout: float = 10.0) -> None:
    """Stop one recorded process (SIGTERM, then SIGKILL) and forget it. A process on a
    host that cannot be reached now stays on record (the next teardown tries again):
    forgotten, it would run on unrecorded. So does one whose host stops answering while
    it is being stopped."""
    record = find(key)
    if record is not None:
        if unreachable(record):
            return
        try:
            terminate(record, timeout)
        except HostUnreachable:
            return
        forget_process(record)
    else:
        forget("procs", key)


# Where Host._spawn_remote's mktemp makes a remote process's log; the only remote path
# forget_process removes, and only the one its record names.
REMOTE_LOG_PREFIX = "/tmp/splitbench-"
# How much of a remote log is kept on this machine when the process is forgotten.
REMOTE_LOG_KEPT_BYTES = 256 * 1024


def remote_logs_dir() -> Path:
    """Where the logs of ended remote processes are kept (their last
    REMOTE_LOG_KEPT_BYTES, one file per record key)."""
    return state_dir() / "remote-logs"


def forget_process(record: ProcRecord) -> None:
    """Forget an ended process. A remote one's log, the file mktemp made for it on its
    host, is copied here (remote_logs_dir) and removed there: nothing of a run is left
    in the host's /tmp, and nothing splitbench did not make is removed."""
    path = record.get("remote_log")
    if record.get("remote") and isinstance(path, str) and path.startswith(REMOTE_LOG_PREFIX) \
            and "/" not in path.removeprefix(REMOTE_LOG_PREFIX):
        kept = remote_pids.remote_run(record["remote"], ["tail", "-c",
                                                         str(REMOTE_LOG_KEPT_BYTES), "--", path])
        if kept is not None and kept.returncode == 0:
            files.write_text(remote_logs_dir() / f"{record['key']}.log", kept.stdout)
            remote_pids.remote_run(record["remote"], ["rm", "-f", "--", path])
    forget("procs", record["key"])


def unreachable(record: ProcRecord) -> bool:
    """The record's process is on an SSH host that does not answer now."""
    if not record.get("remote"):
        return False
    result = remote_pids.remote_run(record["remote"], ["true"])
    return result is None or result.returncode != 0


def terminate(record: ProcRecord, timeout: float) -> None:
    """SIGTERM, then SIGKILL after `timeout` s. HostUnreachable: a remote host stopped
    answering on the way (whether the process has ended cannot be told: keep its
    record)."""
    if not is_alive(record, strict=True):
        _reap(record)
        _end_group(record)
        return
    _signal(record, signal.SIGTERM)
    if poll_until(lambda: not is_alive(record, strict=True), timeout,
                  0.05 if not record.get("remote") else 0.3):
        _reap(record)
        _end_group(record)
        return
    _signal(record, signal.SIGKILL)
    _reap(record)


def _end_group(record: ProcRecord) -> None:
    """Whatever of a group's process is left once its leader has gone (a worker that
    ignored its parent's end) is killed, while the group's number is still ours: Linux
    gives no new process a pid that a group's members still use as their group id, so
    once a process that is not the recorded leader holds that pid, the group of that
    number is another program's (a reused pid), and is left alone."""
    if record.get("group") and not _pid_reused(record):
        _signal(record, signal.SIGKILL)


def _pid_reused(record: ProcRecord) -> bool:
    """Another process than the recorded one holds the record's pid now (or the record
    cannot tell which process it was)."""
    if record.get("start_time") is None:
        return True
    pid = int(record["pid"])
    if record.get("remote"):
        now = remote_pids.start_time(record["remote"], pid, strict=True)
    else:
        now = None if proc_stat.is_zombie(pid) else proc_stat.start_time(pid)
    return now is not None and now != record["start_time"]


def _reap(record: ProcRecord, timeout: float = 5.0) -> None:
    """Collect a stopped child of this process now (its CPU time moves into this
    process's reaped-children counters then: collected at some later start of another
    process, in the middle of a cell, it would count as the cell's own). Not a pid that
    another process holds now: were that a child of ours too, its exit status is not ours."""
    if record.get("remote") or (record.get("start_time") is not None and _pid_reused(record)):
        return

    def collected() -> bool:
        try:
            pid, _ = os.waitpid(record["pid"], os.WNOHANG)
        except ChildProcessError:
            pid = record["pid"]  # not our child, or already collected
        if pid:
            _CHILDREN.pop(record["pid"], None)
        return bool(pid)

    poll_until(collected, timeout, 0.01)


def exit_status(record: ProcRecord) -> str | None:
    """How a process this one started has ended ("exited with code 1", "killed by
    SIGSEGV"), reaping it; None while it runs, or when it is not our child (then no
    one here can know)."""
    if record.get("remote"):
        return None
    try:
        pid, status = os.waitpid(record["pid"], os.WNOHANG)
    except ChildProcessError:
        return None
    if pid == 0:
        return None
    _CHILDREN.pop(record["pid"], None)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    return f"exited with code {os.WEXITSTATUS(status)}"


def record_namespace(name: str) -> None:
    ensure_job_reaper()
    _write(records_dir("netns") / f"{name}.json", {"name": name})


def namespaces() -> list[str]:
    paths = sorted(records_dir("netns").glob("*.json"))
    for path in paths:
        check_owned(path)  # its name is deleted as root
    return [path.stem for path in paths]


def record_cgroup(path: str, remote: SSHSettings | None = None) -> None:
    """Remember a cgroup this run made for its own processes (interference's), on this
    machine or on the host `remote` names: a change whose undo, `rmdir`, removes it once
    it is empty (one that still holds processes stays on record for the next teardown)."""
    key = "cgroup-" + hashlib.sha256(
        json.dumps([path, remote], sort_keys=True).encode()).hexdigest()[:16]
    if change(key) is None:
        record_change(key, "b" if remote else "a", remote, ["rmdir", path],
                      gone_if="No such file or directory", cgroup=path)


def record_change(key: str, host: str, remote: SSHSettings | None, undo: list[str],
                  gone_if: str | list[str], **state: Any) -> None:
    """Remember a change this run made to a host (a firewall table) and the command that
    undoes it, which teardown runs there: on this machine (`undo` is the whole local
    command line) or on the host `remote` names. `gone_if`: a part of the undo's error
    (or several) that means the change is already gone. `state`: what the change holds now, for the
    code that makes it (`change`)."""
    ensure_job_reaper()
    _write(records_dir("changes") / f"{key}.json", {"host": host, "remote": remote, "undo": undo,
                                                  "gone_if": gone_if, **state})


def change(key: str) -> ChangeRecord | None:
    """A recorded change to a host (record_change), None when there is none."""
    return read_record(records_dir("changes") / f"{key}.json")


def ensure_job_reaper() -> None:
    """In a pair's cluster job, start the job's reaper once: it watches the job's batch
    script and tears down what the job started when the script ends or SLURM stops the
    job (a cancel, a time limit, Ctrl-C on Snakemake). The pair's jobs run one after
    another inside this one SLURM job, so its servers live from launch to last cell."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return
    key = f"reaper-slurm-{job}"
    with locked("reaper"):
        record = find(key)
        if record is not None and is_alive(record):
            return
        root = proc_stat.job_root(os.getpid())
        spawn([sys.executable, "-m", "splitbench.infra.reaper", "job-reaper", str(root), key],
              role="reaper", key=key, log_path=state_dir() / "reaper.log",
              env={"SPLITBENCH_STATE": str(state_dir())})
