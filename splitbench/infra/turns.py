"""One job at a time drives a pair, across runs too.

Within a run, a file lock in its state directory keeps its jobs apart (a link check's
iperf3 beside a cell would skew it). Another run against the same host B (another work
directory, another user on A, another host A) has another state directory; without
more, its cells would measure while this run's do, and each would read the other as
interference. So a job that drives a pair with a remote host B also holds exclusive
locks on both machines for as long as it runs: flock on host A's /tmp directory, and
flock(1) on host B's, over one SSH channel. Every run of every user takes turns, and no
file is made for it. The other jobs a workflow runs on host A (models, tables, charts,
the report) hold A's lock shared: they run side by side, never during another run's
measurement. Each job takes A's lock before its imports (`job_turn`): a job's start-up
alone is a second of CPU. A lock ends with its process or channel: a job killed on A
lets the next run go on at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator

from splitbench.infra import files, procs
from splitbench.infra.hosts import Host, HostError

# How long a job waits for a host's lock, naming who holds it: any user can take the
# lock (it is every run's), and one who never lets go would stall every run for ever. A
# job of another run holds it for one cell or link check: minutes. Past it, B's fails the
# job's launch (a result), A's is gone on without (hold_this_machine).
TURN_WAIT_S = 3600
# What B's lock holds while the job runs: it says so, then waits for its input to end.
_HOLD = ["sh", "-c", "echo held; exec cat >/dev/null"]
# How long a job waits quietly before it says that it waits for another run.
_QUIET_S = 2.0
# Who holds a flock on a host's /tmp (the turn lock): a line per holder, from
# /proc/locks (its device and inode) and the holder's /proc entry. Run with the host's
# Python, here or over SSH.
HOLDERS_PY = r"""
import os, pwd
st = os.stat("/tmp")
key = "%02x:%02x:%d" % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
for line in open("/proc/locks"):
    f = line.split()
    if "->" in f or len(f) < 6 or f[1] != "FLOCK" or f[5] != key:
        continue
    pid = f[4]
    if not os.path.isdir("/proc/" + pid):
        # The locker has gone, a child it started keeps the lock (`flock /tmp cmd`):
        # the processes with /tmp open (those this user may see).
        kept = []
        for other in filter(str.isdigit, os.listdir("/proc")):
            try:
                fds = os.listdir("/proc/%s/fd" % other)
                if any(os.readlink("/proc/%s/fd/%s" % (other, fd)) == "/tmp" for fd in fds):
                    kept.append(other)
            except OSError:  # gone meanwhile, or another user's
                continue
        pid = kept[0] if kept else pid
    try:
        uid = os.stat("/proc/" + pid).st_uid
        user = "user %s" % pwd.getpwuid(uid).pw_name
    except KeyError:
        user = "uid %d" % uid
    except OSError:
        user = "user ?"
    try:
        command = open("/proc/%s/comm" % pid).read().strip()
    except OSError:
        command = "?"
    print("pid %s (%s, %s, %s)" % (pid, user, command, f[3].lower()))
"""


class TurnTimeout(HostError):
    """Host B's turn lock was held by someone else for TURN_WAIT_S."""


def holders(host: Host | None = None) -> str:
    """Who holds the turn lock on `host` (None: this machine), for a message: "pid 812
    (user mallory, flock, write)", or that it cannot be told."""
    argv = [host.python if host else sys.executable, "-c", HOLDERS_PY]
    try:
        said = host.run(argv, check=False) if host else subprocess.run(
            argv, capture_output=True, text=True, timeout=30)
    except (HostError, OSError, subprocess.SubprocessError):
        return "its holder could not be read"
    found = [line for line in said.stdout.splitlines() if line.strip()]
    return "held by " + "; ".join(found) if found else "its holder could not be read"


def job_turn(argv: list[str], by_a_rule: Iterable[str], driving: Iterable[str]
             ) -> contextlib.AbstractContextManager[None]:
    """A workflow job's hold on host A, taken before its imports: exclusive for a job
    that drives a pair (a command of `driving`) with a remote host B, shared for the
    workflow's other jobs (`by_a_rule`), none for a person's commands (teardown must
    never wait)."""
    command = argv[0] if argv else ""
    if command in driving and _drives_remote_pair(argv):
        return _this_machine(fcntl.LOCK_EX)
    if command in by_a_rule and command not in driving:
        return _this_machine(fcntl.LOCK_SH)
    return contextlib.nullcontext()


def _drives_remote_pair(argv: list[str]) -> bool:
    for index, word in enumerate(argv):
        flag, _, value = word.partition("=")
        if flag in ("--spec", "--link-spec"):
            text = value or (argv[index + 1] if index + 1 < len(argv) else "")
            with contextlib.suppress(ValueError, AttributeError, KeyError, TypeError):
                spec = json.loads(text)
                if isinstance(spec.get("link"), dict):  # a sweep's: its baseline link
                    spec = spec["link"]
                # Only an SSH pair's link slice names its hosts (splitbench.pairs).
                return bool(((spec.get("hosts") or {}).get("b") or {}).get("ssh"))
    return False


@contextlib.contextmanager
def turn(pair: str, host_b: Host | None) -> Iterator[None]:
    """This job's turn on `pair`: this run's lock, then, where host B is reached over
    SSH, B's (waiting, and saying so in the job's log, while another run drives B).
    Host A's is the job process's own (`job_turn`)."""
    with procs.locked(f"pair-{pair}"):
        if host_b is None or not host_b.remote:
            yield
            return
        try:
            # Where B's /tmp is this machine's, host A's lock (this job's) is B's too.
            held = None if _same_tmp(host_b) else _take(host_b)
        except TurnTimeout:
            raise  # B answers, but someone keeps its lock: the job's result says who
        except HostError as exc:
            # B unreachable: nothing runs there to take turns with, and the job's own
            # step meets the same error and makes it its result.
            print(f"host b: no turn lock ({exc})", flush=True)
            held = None
        try:
            yield
        finally:
            if held is not None:
                _release(held)


@contextlib.contextmanager
def _this_machine(mode: int) -> Iterator[None]:
    handle = hold_this_machine(mode)
    try:
        yield
    finally:
        let_go(handle)


def hold_this_machine(mode: int = fcntl.LOCK_SH) -> int:
    """Host A's lock in `mode`, waited for (and said so) while another run holds it the
    other way; the open descriptor it lives on. A workflow's own start-up (its DAG, the
    doctor's checks) holds it shared until its jobs begin (rules/common.smk).

    At most TURN_WAIT_S: any user can take the lock, and one who never lets go would
    stall every run for ever. After that the job goes on without it, naming who holds
    it; whatever that user's processes do meanwhile is other processes' CPU, which the
    cells' interference check measures and flags (the job is not lost: failing it here,
    before its imports, would cost its cell's result and the report)."""
    handle = os.open("/tmp", os.O_RDONLY)
    try:
        fcntl.flock(handle, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        started = time.monotonic()
        print("host a: another run " + ("measures" if mode == fcntl.LOCK_SH else "works")
              + f" here ({holders()}); waiting for its turn", flush=True)
        if not _wait_for(handle, mode, started + TURN_WAIT_S):
            print(f"host a: the turn lock (flock /tmp) was not free after {TURN_WAIT_S} s, "
                  f"{holders()}: going on without it (its cells' interference check "
                  "says what that holder's processes did meanwhile)", flush=True)
            return handle
        print(f"host a: its turn came after {time.monotonic() - started:.0f} s", flush=True)
    return handle


def _wait_for(handle: int, mode: int, deadline: float) -> bool:
    """Whether the lock came before `deadline` (monotonic), asked for twice a second."""
    while time.monotonic() < deadline:
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    return False


def let_go(handle: int) -> None:
    """End a hold of `hold_this_machine`: the lock ends with its descriptor."""
    with contextlib.suppress(OSError):
        os.close(handle)


def _same_tmp(host_b: Host) -> bool:
    """Whether B's /tmp is this machine's (B a namespace of A reached over SSH, or A
    itself): the same kernel and the same directory. Its lock is then the one this job
    holds already, and asking for it again from B would wait for ever. Asked of B once
    per boot of A, not by every job: kept in the run's state under A's boot id and B's
    address (a B that shares A's /tmp shares its boots; another machine never does)."""
    here = os.stat("/tmp")
    with open("/proc/sys/kernel/random/boot_id") as boot:
        mine = [boot.read().strip(), f"{here.st_dev}:{here.st_ino}"]
    known_path = procs.state_dir() / "hosts" / "same-tmp.json"
    known = files.read_json(known_path) or {}
    key = json.dumps([mine, host_b.ssh_settings()], sort_keys=True)
    if key not in known:
        said = host_b.run(["sh", "-c",
                           "cat /proc/sys/kernel/random/boot_id; stat -c %d:%i /tmp"],
                          check=False)
        if said.returncode != 0:
            return False  # not known: asked again by the next job
        known[key] = said.stdout.split() == mine
        files.write_json(known_path, known)
    return bool(known[key])


def _take(host_b: Host):  # noqa: ANN202 (a RemoteProcess)
    held = host_b.popen(["flock", "-w", str(TURN_WAIT_S), "/tmp", *_HOLD],
                        stdout=subprocess.PIPE, stdin=True)
    started = time.monotonic()
    said = False
    while True:
        ready, _, _ = select.select([held.stdout], [], [], 1.0)
        if ready:
            line = held.stdout.readline()
            if line.strip() == "held":
                if said:
                    print(f"host b: its turn came after {time.monotonic() - started:.0f} s",
                          flush=True)
                return held
            _release(held)
            if not line.strip() and time.monotonic() - started >= TURN_WAIT_S:
                raise TurnTimeout(f"host b ({host_b.ssh}): its turn lock (flock /tmp) was "
                                  f"not free after {TURN_WAIT_S} s, {holders(host_b)}: "
                                  "another run, or a user who keeps it; nothing was "
                                  "measured")
            raise HostError(f"host b ({host_b.ssh}): could not take its turn lock "
                            f"(flock /tmp): {line.strip() or 'flock ended'}; is util-linux "
                            "installed there?")
        if not said and time.monotonic() - started >= _QUIET_S:
            print(f"host b ({host_b.ssh}): another run drives it ({holders(host_b)}); "
                  "waiting for its turn", flush=True)
            said = True


def _release(held) -> None:  # noqa: ANN001 (a RemoteProcess)
    with contextlib.suppress(OSError, EOFError, subprocess.TimeoutExpired):
        held.stdin.close()
        held.wait(timeout=10)
    with contextlib.suppress(OSError, EOFError):
        held.kill()
