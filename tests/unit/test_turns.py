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
