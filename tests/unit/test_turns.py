"""Which jobs take host A's turn lock, and how (infra/turns.py; two runs taking turns
for real: tests/workflow/test_another_machine.py)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os

import pytest

from splitbench import commands
from splitbench.infra import turns

SSH = json.dumps({"pair": "rig", "link": "cable", "mode": "ssh",
                  "hosts": {"a": {}, "b": {"ssh": "bench@b"}}})
SWEEP = json.dumps({"pair": "rig", "model": "m", "workers": 1, "link": json.loads(SSH)})
EMBEDDED = json.dumps({"pair": "lab", "mode": "embedded", "hosts": {"a": {}, "b": {}}})


def job_turn(argv: list[str]) -> contextlib.AbstractContextManager[None]:
    return turns.job_turn(argv, commands.BY_A_RULE, commands.DRIVING)


def held_by_another(mode: int) -> bool:
    """Whether a lock of `mode` on /tmp, asked for from a descriptor of its own, waits."""
    handle = os.open("/tmp", os.O_RDONLY)
    try:
        fcntl.flock(handle, mode | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(handle)


def test_a_job_driving_an_ssh_pair_holds_host_a_alone():
    for argv in (["cell", "--link-spec", SSH], ["link", f"--spec={SSH}"],
                 ["roundtrips", "--spec", SWEEP]):
        with job_turn(argv):
            assert held_by_another(fcntl.LOCK_SH), argv
        assert not held_by_another(fcntl.LOCK_EX)


def test_other_workflow_jobs_share_host_a_and_a_persons_commands_take_nothing():
    with job_turn(["report", "--out", "x"]):
        assert held_by_another(fcntl.LOCK_EX)
        assert not held_by_another(fcntl.LOCK_SH)
    # A job driving the embedded lab holds nothing of host A: its pair is its own.
    with job_turn(["cell", "--link-spec", EMBEDDED]):
        assert not held_by_another(fcntl.LOCK_EX)
    for person in ("teardown", "doctor", "cells", "whatif"):
        assert isinstance(job_turn([person]), contextlib.nullcontext), person


@pytest.mark.parametrize("text", ["not json", "[]", '{"mode": "ssh"}'])
def test_a_spec_it_cannot_read_takes_no_exclusive_hold(text):
    assert not turns._drives_remote_pair(["cell", "--link-spec", text])


class FakeB:
    """A host B that answers the /tmp question as `boot` and `tmp` say, and counts it."""

    def __init__(self, ssh: str, boot: str, tmp: str) -> None:
        self.ssh, self.asked, self.said = ssh, 0, f"{boot}\n{tmp}\n"

    def ssh_settings(self) -> dict:
        return {"ssh": self.ssh}

    def run(self, argv, check=True):  # noqa: ANN001, ANN201 (Host.run's shape)
        self.asked += 1
        return type("Done", (), {"returncode": 0, "stdout": self.said})()


def test_whether_b_shares_a_tmp_is_asked_once_per_boot_not_by_every_job(state_dir):
    with open("/proc/sys/kernel/random/boot_id") as boot:
        here = boot.read().strip()
    tmp = os.stat("/tmp")
    namespace = FakeB("bench@10.0.0.2", here, f"{tmp.st_dev}:{tmp.st_ino}")
    other = FakeB("bench@10.0.0.6", "another-boot", f"{tmp.st_dev}:{tmp.st_ino}")
    for _ in range(3):  # three jobs of the run
        assert turns._same_tmp(namespace) is True
        assert turns._same_tmp(other) is False
    assert (namespace.asked, other.asked) == (1, 1)
