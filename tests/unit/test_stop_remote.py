"""Stopping a process on host B whose connection fails part-way: its record is kept (the
next teardown tries again), never forgotten while the process may still run. Host B is
a fake here (remote_pids.remote_run answered in-process); the real transport is tested
against sshd in tests/integration/test_ssh.py."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from splitbench.infra import proc_stat, procs, remote_pids, teardown

START = 777
REMOTE = {"ssh": "bench@192.0.2.7", "ssh_port": None, "identity": None, "known_hosts": None}


class FlakyHostB:
    """Answers `true` and `kill`; answers `cat /proc/<pid>/stat` with a live process for
    its first `answers` reads, then loses the connection (None) for every command."""

    def __init__(self, answers: int) -> None:
        self.answers = answers
        self.lost = False
        self.commands: list[list[str]] = []

    def __call__(self, remote, argv):
        self.commands.append(argv)
        if argv[0] == "cat":
            if self.answers == 0:
                self.lost = True
            self.answers -= 1
        if self.lost:
            return None
        stdout = f"4242 (rpc-server) S {' '.join(['0'] * 18)} {START} 0\n" \
            if argv[0] == "cat" else ""
        return subprocess.CompletedProcess(argv, 0, stdout, "")


def record_remote_worker() -> None:
    procs.record_process({"pid": 4242, "start_time": START, "remote": REMOTE,
                          "role": "rpc-server", "key": "far", "host": "b"})


@pytest.mark.parametrize("answers", [0, 1], ids=["lost before its first check",
                                                 "lost after SIGTERM"])
def test_a_connection_lost_while_stopping_keeps_the_record(state_dir, monkeypatch, answers):
    host_b = FlakyHostB(answers)
    monkeypatch.setattr(remote_pids, "remote_run", host_b)
    record_remote_worker()
    procs.stop("far", timeout=0.5)
    assert procs.find("far") is not None, host_b.commands
    if answers:
        assert ["sh", "-c", remote_pids.KILL_IF_SAME, "sh", "4242", str(START), "TERM",
                "4242"] in host_b.commands
    procs.forget("procs", "far")  # the test's own fake record


def test_teardown_says_it_lost_the_host_and_keeps_the_record(state_dir, monkeypatch):
    monkeypatch.setattr(remote_pids, "remote_run", FlakyHostB(1))
    record_remote_worker()
    done = teardown.teardown()
    assert any("lost host b while stopping rpc-server pid 4242" in line
               and "kept on record" in line for line in done), done
    assert procs.find("far") is not None
    procs.forget("procs", "far")


def test_a_process_that_is_gone_is_forgotten(state_dir, monkeypatch):
    """The host answers and the process is gone: forgotten, as before."""
    monkeypatch.setattr(remote_pids, "remote_run", lambda remote, argv: subprocess.CompletedProcess(
        argv, 1 if argv[0] == "cat" else 0, "", "No such file or directory"))
    record_remote_worker()
    procs.stop("far", timeout=0.5)
    assert procs.find("far") is None


def test_a_remote_process_s_start_time_is_read_by_the_script_that_starts_it(
        state_dir, monkeypatch):
    """The spawn script runs here in place of host B (a local sh), and every later
    command to B fails: the record still has the process's own start time, so teardown
    can stop it."""
    from splitbench.infra.hosts import Host

    def run_here(self, argv, **_):
        return subprocess.run(argv, capture_output=True, text=True, check=True)

    monkeypatch.setattr(Host, "run", run_here)
    monkeypatch.setattr(remote_pids, "remote_run", lambda remote, argv: None)
    record = Host("b", ssh="bench@192.0.2.7").spawn(
        ["sleep", "30"], role="rpc-server", key="spawned", log_path=state_dir / "unused.log")
    try:
        assert record["start_time"] == proc_stat.start_time(record["pid"]) is not None
        assert procs.find("spawned")["start_time"] == record["start_time"]
    finally:
        os.kill(record["pid"], signal.SIGKILL)
        procs.forget("procs", "spawned")
        subprocess.run(["rm", "-f", "--", record["remote_log"]], check=True)


def test_a_remote_kill_checks_the_start_time_in_the_same_command(state_dir, monkeypatch):
    """The check and the kill run as one command on B (a local sh in place of B here): a
    process whose start time is the record's is signalled; one that took its pid since
    (another start time) is not, and neither is a pid that has gone."""
    monkeypatch.setattr(remote_pids, "remote_run", lambda remote, argv: subprocess.run(
        argv, capture_output=True, text=True))
    ours = subprocess.Popen(["sleep", "30"])
    other = subprocess.Popen(["sleep", "30"])
    try:
        start = proc_stat.start_time(ours.pid)
        procs._signal({"pid": ours.pid, "start_time": start, "remote": REMOTE},
                      signal.SIGTERM)
        assert ours.wait(timeout=5) == -signal.SIGTERM
        # The record says another start time: the process now at that pid is not it.
        procs._signal({"pid": other.pid, "start_time": proc_stat.start_time(other.pid) + 1,
                       "remote": REMOTE}, signal.SIGKILL)
        procs._signal({"pid": other.pid, "start_time": None, "remote": REMOTE},
                      signal.SIGKILL)
        assert other.poll() is None
        procs._signal({"pid": ours.pid, "start_time": start, "remote": REMOTE},
                      signal.SIGKILL)  # gone: nothing to signal, no error
    finally:
        ours.kill()
        other.kill()
        other.wait()
