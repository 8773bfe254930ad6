"""The turn lock every run takes on a host's /tmp (infra/turns.py), held by another
user who keeps it: a real flock by a process of another uid."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time

import pytest

from splitbench.infra import turns
from tests.conftest import needs_root


def lock_kept_by_another_user() -> subprocess.Popen:
    """uid 4242 holding the turn lock on /tmp, once it holds it (flock runs `sleep` as
    its child, which holds the lock too: a group of its own, ended with os.killpg)."""
    keeper = subprocess.Popen(["setpriv", "--reuid", "4242", "--regid", "4242",
                               "--clear-groups", "flock", "/tmp", "sleep", "60"],
                              start_new_session=True)
    deadline = time.monotonic() + 10
    while "pid" not in turns.holders() and time.monotonic() < deadline:
        time.sleep(0.05)
    return keeper


def end(keeper: subprocess.Popen) -> None:
    """End the keeper's group, and return once the lock is free: the group's `sleep`
    dies after SIGKILL in its own time, and holds the lock until it has."""
    os.killpg(keeper.pid, signal.SIGKILL)
    keeper.wait()
    deadline = time.monotonic() + 10
    tmp = os.open("/tmp", os.O_RDONLY)
    try:
        while time.monotonic() < deadline:
            try:
                fcntl.flock(tmp, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            fcntl.flock(tmp, fcntl.LOCK_UN)
            return
    finally:
        os.close(tmp)
    raise AssertionError("the killed keeper's group still holds the lock after 10 s")


@needs_root()
def test_a_turn_lock_kept_by_another_user_times_out_naming_its_holder(state_dir,
                                                                      monkeypatch):
    """Any user can take the turn lock on /tmp; one who keeps it no longer stalls a run
    for ever: after TURN_WAIT_S the job's turn fails, naming the holder's pid and uid
    (here host B is this machine: its command runs here, not over SSH)."""
    from splitbench.infra.hosts import Host

    class ThisMachineAsB(Host):
        def popen(self, argv, *, stdout=None, stdin=False):  # noqa: ANN001, ANN202
            return subprocess.Popen(argv, stdout=stdout, text=True,
                                    stdin=subprocess.PIPE if stdin else None)

    keeper = lock_kept_by_another_user()
    try:
        assert f"pid {keeper.pid} (uid 4242, flock, write)" in turns.holders()
        monkeypatch.setattr(turns, "TURN_WAIT_S", 1)
        started = time.monotonic()
        with pytest.raises(turns.TurnTimeout) as raised:
            turns._take(ThisMachineAsB("b"))
        assert time.monotonic() - started < 10
        # The locker gone, its child keeps the lock: the child is named.
        os.kill(keeper.pid, signal.SIGKILL)
        keeper.wait()
        assert "(uid 4242, sleep, write)" in turns.holders(), turns.holders()
    finally:
        os.killpg(keeper.pid, signal.SIGKILL)
        keeper.wait()
    assert f"not free after 1 s, held by pid {keeper.pid} (uid 4242, flock, write)" in \
        str(raised.value)


@needs_root()
def test_host_as_turn_lock_kept_by_another_user_is_gone_on_without_naming_it(monkeypatch,
                                                                               capsys):
    """Host A's lock: after TURN_WAIT_S the job goes on without it (its cells'
    interference check sees what the holder does), saying who holds it; a lock that
    comes free in time is taken."""
    keeper = lock_kept_by_another_user()
    try:
        monkeypatch.setattr(turns, "TURN_WAIT_S", 1)
        started = time.monotonic()
        handle = turns.hold_this_machine()
        waited = time.monotonic() - started
        turns.let_go(handle)
        said = capsys.readouterr().out
        assert 1 <= waited < 5, waited
        assert "host a: another run measures here (" in said
        assert ("host a: the turn lock (flock /tmp) was not free after 1 s, held by "
                f"pid {keeper.pid} (uid 4242, flock, write)") in said, said
        assert "going on without it" in said
    finally:
        end(keeper)
    # Free again: taken at once, nothing said.
    handle = turns.hold_this_machine(turns.fcntl.LOCK_EX)
    turns.let_go(handle)
    assert capsys.readouterr().out == ""
