"""Processes and namespaces a run starts, recorded so that exactly those are stopped.

A run's long-lived parts (RPC workers, llama-servers, delay relays, namespaces) outlive
the Snakemake job that started them: the next cell job reuses them. Each is recorded as
a small JSON file under the state directory. `teardown()` stops what is recorded (by
pid, checked against the recorded start time so a reused pid is never hit) and deletes
the recorded namespaces. A reaper process watches the Snakemake process and tears down
when it goes away, whether it ended normally, on Ctrl-C or by kill -9.

In a pair's cluster job (SLURM_JOB_ID set) the records live in a directory of the job's
own, since on a shared filesystem another node's pids are not this node's, and a job
reaper on the node tears the pair down when the job ends or is cancelled.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from splitbench.infra import files
from splitbench.stage import Stage

# Stop order: the HTTP front end before the RPC worker it talks to (a worker that
# goes first makes llama-server abort mid-call: "Remote RPC server crashed").
# A measuring job goes first: after Snakemake is killed, its jobs run on as orphans.
STOP_ORDER = ("job", "llama-server", "rpc-server", "relay", "probe", "iperf3", "other")


def state_dir() -> Path:
    base = Path(os.environ.get("SPLITBENCH_STATE", ".splitbench")).resolve()
    job = os.environ.get("SLURM_JOB_ID")
    if job and base.name != f"slurm-{job}":
        return base / f"slurm-{job}"
    return base


def _records(kind: str) -> Path:
    path = state_dir() / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """An exclusive lock shared by every process of this run (file lock)."""
    path = state_dir() / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def start_time(pid: int) -> int | None:
    """The kernel's start time of a process (clock ticks since boot), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22; the command name (field 2) may contain spaces, so split after ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])


def is_alive(record: dict[str, Any]) -> bool:
    """Running, and the same process that was recorded (not a reused pid, not a zombie)."""
    pid = record["pid"]
    if record.get("start_time") is None:  # which process it was cannot be told
        return False
    if record.get("remote"):
        return remote_start_time(record["remote"], pid) == record["start_time"]
    return start_time(pid) == record["start_time"] and not _is_zombie(pid)


def remote_start_time(remote: dict[str, Any], pid: int) -> int | None:
    """A remote process's start time, None when it is gone, a zombie, or its host cannot
    be reached. remote: the host's connection settings (Host.ssh_settings())."""
    result = _remote_run(remote, ["cat", f"/proc/{int(pid)}/stat"])
    if result is None or result.returncode != 0 or ")" not in result.stdout:
        return None
    fields = result.stdout.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])


def _remote_run(remote: dict[str, Any] | list[str],
                argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    """argv on a recorded process's host, over this process's own connection to it (a
    teardown may run in another process than the one that started it); None when the
    host cannot be reached."""
    if isinstance(remote, list):  # a record from before the paramiko transport: ssh argv
        return subprocess.run([*remote, shlex.join(argv)], capture_output=True, text=True,
                              timeout=30)
    from splitbench.infra import ssh  # paramiko loads only where a host is remote

    try:
        return ssh.run(remote, argv, timeout=30)
    except ssh.SSHError:
        return None


def _signal(record: dict[str, Any], sig: signal.Signals) -> None:
    """Signal the process, or its whole process group where the record says `group`
    (a server that starts its own workers: each was started in a session of its own, so
    its group is its own and its children's)."""
    pid = int(record["pid"])
    if record.get("remote"):
        target = ["--", f"-{pid}"] if record.get("group") else [str(pid)]
        _remote_run(record["remote"], ["kill", "-s", sig.name.removeprefix("SIG"), *target])
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
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
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
    record = {
        "pid": proc.pid,
        "start_time": start_time(proc.pid),
        "role": role,
        "key": key,
        "argv": list(argv),
        "log": str(log_path),
        **(extra or {}),
    }
    return record_process(record)


def _forget(kind: str, key: str) -> None:
    """Drop a record (a process or namespace that is gone)."""
    with contextlib.suppress(FileNotFoundError):
        (_records(kind) / f"{key}.json").unlink()


def record_process(record: dict[str, Any]) -> dict[str, Any]:
    """Remember a started process (local or remote) so teardown can stop it."""
    _write(_records("procs") / f"{record['key']}.json", record)
    return record


@contextlib.contextmanager
def job(stage: str) -> Iterator[None]:
    """Record this process as a running job of the run, so that the reaper stops it when
    Snakemake is killed (an orphan would measure on against torn-down servers)."""
    key = f"job-{os.getpid()}"
    record_process({"pid": os.getpid(), "start_time": start_time(os.getpid()), "role": "job",
                    "key": key, "argv": sys.argv, "stage": stage})
    try:
        yield
    finally:
        _forget("procs", key)


def _write(path: Path, data: dict[str, Any]) -> None:
    files.write_json(path, data)


def find(key: str) -> dict[str, Any] | None:
    path = _records("procs") / f"{key}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def all_procs() -> list[dict[str, Any]]:
    out = []
    for path in sorted(_records("procs").glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            out.append(json.loads(path.read_text()))
    return out


def stop(key: str, timeout: float = 10.0) -> None:
    """Stop one recorded process (SIGTERM, then SIGKILL) and forget it. A process on a
    host that cannot be reached now stays on record (the next teardown tries again):
    forgotten, it would run on unrecorded."""
    record = find(key)
    if record is not None:
        if _unreachable(record):
            return
        _terminate(record, timeout)
        _forget_process(record)
    else:
        _forget("procs", key)


# Where Host._spawn_remote's mktemp makes a remote process's log; the only remote path
# _forget_process removes, and only the one its record names.
REMOTE_LOG_PREFIX = "/tmp/splitbench-"
# How much of a remote log is kept on this machine when the process is forgotten.
REMOTE_LOG_KEPT_BYTES = 256 * 1024


def remote_logs_dir() -> Path:
    """Where the logs of ended remote processes are kept (their last
    REMOTE_LOG_KEPT_BYTES, one file per record key)."""
    return state_dir() / "remote-logs"


def _forget_process(record: dict[str, Any]) -> None:
    """Forget an ended process. A remote one's log, the file mktemp made for it on its
    host, is copied here (remote_logs_dir) and removed there: nothing of a run is left
    in the host's /tmp, and nothing splitbench did not make is removed."""
    path = record.get("remote_log")
    if record.get("remote") and isinstance(path, str) and path.startswith(REMOTE_LOG_PREFIX) \
            and "/" not in path.removeprefix(REMOTE_LOG_PREFIX):
        kept = _remote_run(record["remote"], ["tail", "-c", str(REMOTE_LOG_KEPT_BYTES), "--",
                                              path])
        if kept is not None and kept.returncode == 0:
            files.write_text(remote_logs_dir() / f"{record['key']}.log", kept.stdout)
            _remote_run(record["remote"], ["rm", "-f", "--", path])
    _forget("procs", record["key"])


def _unreachable(record: dict[str, Any]) -> bool:
    """The record's process is on an SSH host that does not answer now."""
    if not record.get("remote"):
        return False
    result = _remote_run(record["remote"], ["true"])
    return result is None or result.returncode != 0


def _terminate(record: dict[str, Any], timeout: float) -> None:
    if not is_alive(record):
        _reap(record)
        _end_group(record)
        return
    _signal(record, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(record):
            _reap(record)
            _end_group(record)
            return
        time.sleep(0.05 if not record.get("remote") else 0.3)
    _signal(record, signal.SIGKILL)
    _reap(record)


def _end_group(record: dict[str, Any]) -> None:
    """Whatever of a group's process is left once its leader has gone (a worker that
    ignored its parent's end) is killed, while the group's number is still ours: Linux
    gives no new process a pid that a group's members still use as their group id, so
    once a process that is not the recorded leader holds that pid, the group of that
    number is another program's (a reused pid), and is left alone."""
    if record.get("group") and not _pid_reused(record):
        _signal(record, signal.SIGKILL)


def _pid_reused(record: dict[str, Any]) -> bool:
    """Another process than the recorded one holds the record's pid now (or the record
    cannot tell which process it was)."""
    if record.get("start_time") is None:
        return True
    pid = int(record["pid"])
    if record.get("remote"):
        now = remote_start_time(record["remote"], pid)
    else:
        now = None if _is_zombie(pid) else start_time(pid)
    return now is not None and now != record["start_time"]


def _reap(record: dict[str, Any], timeout: float = 5.0) -> None:
    """Collect a stopped child of this process now. Its whole CPU time moves into this
    process's reaped-children counters when it is collected; Python's subprocess module
    would collect it at some later start of another process, in the middle of a cell,
    where the interference meter would count that server's lifetime as the cell's own."""
    if record.get("remote"):
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid, _ = os.waitpid(record["pid"], os.WNOHANG)
        except ChildProcessError:
            pid = record["pid"]  # not our child, or already collected
        if pid:
            _CHILDREN.pop(record["pid"], None)
            return
        if time.monotonic() > deadline:
            return
        time.sleep(0.01)


def exit_status(record: dict[str, Any]) -> str | None:
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


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def record_namespace(name: str) -> None:
    ensure_job_reaper()
    _write(_records("netns") / f"{name}.json", {"name": name})


def namespaces() -> list[str]:
    return [p.stem for p in sorted(_records("netns").glob("*.json"))]


def record_cgroup(path: str, remote: dict[str, Any] | None = None) -> None:
    """Remember a cgroup this run made for its own processes (interference's), on this
    machine or on the host `remote` names: a change whose undo, `rmdir`, removes it once
    it is empty (one that still holds processes stays on record for the next teardown)."""
    key = "cgroup-" + hashlib.sha256(
        json.dumps([path, remote], sort_keys=True).encode()).hexdigest()[:16]
    if change(key) is None:
        record_change(key, "b" if remote else "a", remote, ["rmdir", path],
                      gone_if="No such file or directory", cgroup=path)


def record_change(key: str, host: str, remote: dict[str, Any] | None, undo: list[str],
                  gone_if: str | list[str], **state: Any) -> None:
    """Remember a change this run made to a host (a firewall table) and the command that
    undoes it, which teardown runs there: on this machine (`undo` is the whole local
    command line) or on the host `remote` names. `gone_if`: a part of the undo's error
    (or several) that means the change is already gone. `state`: what the change holds now, for the
    code that makes it (`change`)."""
    ensure_job_reaper()
    _write(_records("changes") / f"{key}.json", {"host": host, "remote": remote, "undo": undo,
                                                  "gone_if": gone_if, **state})


def change(key: str) -> dict[str, Any] | None:
    """A recorded change to a host (record_change), None when there is none."""
    return files.read_json(_records("changes") / f"{key}.json")


def _undo_changes() -> list[str]:
    """Undo every recorded change; one whose host cannot be reached, or whose undo
    fails, stays on record for the next teardown."""
    done = []
    records = [(path, files.read_json(path)) for path in _records("changes").glob("*.json")]
    # Remote hosts' first: a change here (the link's address on host A) may be the path
    # to them.
    for path, record in sorted(records, key=lambda pr: (not (pr[1] or {}).get("remote"),
                                                         pr[0].name)):
        if record is None:  # torn: nothing to run
            path.unlink(missing_ok=True)
            continue
        what = f"{' '.join(record['undo'][-5:])} on host {record['host']}"
        if record.get("remote"):
            result = _remote_run(record["remote"], record["undo"])
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
    rank = {role: i for i, role in enumerate(STOP_ORDER)}
    for record in sorted(all_procs(), key=lambda r: rank.get(r.get("role"), len(rank))):
        if record["key"] in spare:
            continue
        if _unreachable(record):
            done.append(f"could not reach host {record.get('host')} to stop "
                        f"{record['role']} pid {record['pid']}: kept on record, the next "
                        "teardown tries again")
            continue
        if record["pid"] != os.getpid():  # the reaper does not stop itself
            if is_alive(record):
                done.append(f"stopped {record['role']} pid {record['pid']}")
            _terminate(record, timeout=10.0)
        _forget_process(record)
    done += _delete_namespaces()
    done += _undo_changes()
    for path in _records("links").glob("*.json"):
        path.unlink()
    if not os.environ.get("SLURM_JOB_ID"):
        done += sweep_ended_jobs()
    return done


# The folders of records a run keeps (procs, namespaces, changes, links), emptied by a
# teardown; logs beside them are kept.
RECORD_KINDS = ("procs", "netns", "changes", "links")


def sweep_ended_jobs(running: Callable[[str], bool | None] | None = None) -> list[str]:
    """Tear down what each ended cluster job left on record (state_dir()/slurm-<job>: a
    job cancelled while host B could not be reached keeps its workers there, and no later
    job reads that folder), then remove its emptied record folders (rmdir: only an empty
    one goes). A job SLURM still lists, or whose state it cannot tell, is left alone.
    `running`: job id -> True, False, or None for unknown (default: squeue)."""
    done = []
    for folder in sorted(state_dir().glob("slurm-*")):
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
    for name in namespaces():
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
        _forget("netns", name)
    return done


def _listed_namespaces() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.split()]


def start_reaper(owner_pid: int, locks: Sequence[str] = ()) -> None:
    """Watch owner_pid; tear the run down when it is gone (also after kill -9).

    locks: the owner's Snakemake directory locks. A killed Snakemake leaves them behind
    and the next run would refuse to start; the reaper removes exactly these files.
    """
    log = state_dir() / "reaper.log"
    spawn(
        [sys.executable, "-m", "splitbench.infra.procs", "reaper", str(owner_pid),
         *(str(Path(lock).resolve()) for lock in locks)],
        role="reaper",
        key=f"reaper-{owner_pid}",
        log_path=log,
        env={"SPLITBENCH_STATE": str(state_dir())},
    )


class _Ended(Exception):
    """SIGTERM or SIGHUP: the reaper itself is being stopped."""


def _on_stop(signum: int, frame: Any) -> None:
    raise _Ended


def _reap_when_gone(owner_pid: int, locks: list[str], key: str | None = None) -> None:
    owner = {"pid": owner_pid, "start_time": start_time(owner_pid)}
    me = key or f"reaper-{owner_pid}"
    if key:
        for line in leave_job_cgroups():
            print(line, flush=True)
    signal.signal(signal.SIGTERM, _on_stop)
    signal.signal(signal.SIGHUP, _on_stop)
    stopped = False
    try:
        while is_alive(owner):
            if find(me) is None:  # the run tore down normally and forgot us
                return
            time.sleep(0.5)
    except _Ended:
        stopped = True
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"{'stopped' if stopped else f'pid {owner_pid} is gone'}: tearing down",
          flush=True)
    for line in teardown(namespaces_first=stopped):
        print(line, flush=True)
    for lock in locks:
        with contextlib.suppress(FileNotFoundError):
            Path(lock).unlink()
            print(f"removed stale Snakemake lock {lock}", flush=True)


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
        root = _job_root(os.getpid())
        spawn([sys.executable, "-m", "splitbench.infra.procs", "job-reaper", str(root), key],
              role="reaper", key=key, log_path=state_dir() / "reaper.log",
              env={"SPLITBENCH_STATE": str(state_dir())})


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
    for line in teardown(spare=[reaper]):
        print(f"splitbench: {line}", file=sys.stderr, flush=True)
    _forget("procs", reaper)


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


def _job_root(pid: int) -> int:
    """The job's outermost process of ours: the ancestor whose parent is slurmstepd (or
    the topmost one below init when there is none)."""
    while True:
        parent = _parent(pid)
        if parent <= 1 or _command_name(parent).startswith("slurmstepd"):
            return pid
        pid = parent


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


# --- the `teardown` stage -------------------------------------------------------------
def _teardown(args: argparse.Namespace) -> None:
    for line in teardown():
        print(line)


STAGES = (Stage("teardown", "stop every process and namespace this run started",
                lambda p: None, _teardown),)


if __name__ == "__main__":
    if sys.argv[1:2] == ["reaper"]:
        _reap_when_gone(int(sys.argv[2]), sys.argv[3:])
    elif sys.argv[1:2] == ["job-reaper"]:
        _reap_when_gone(int(sys.argv[2]), [], key=sys.argv[3])
    elif sys.argv[1:2] == ["teardown"]:
        for line in teardown():
            print(line)
