"""profiles/local-pairs: several embedded pairs side by side on one machine."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import needs_root
from tests.support.two_pairs import (
    FULL,
    assert_pairs_took_turns,
    job_times,
    our_namespaces,
    two_pairs_copy,
)
from tests.support.workflow_run import SNAKEMAKE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), needs_root()]


def test_pairs_run_side_by_side_and_each_pairs_jobs_one_at_a_time(tmp_path):
    # Interference unchecked: the pairs share this machine's CPUs (test_slurm.UNCHECKED).
    # One stream only: who runs when is the question, and a concurrent cell adds a job
    # of the same kind (the SLURM run has them).
    work = two_pairs_copy(tmp_path, contexts={"short": 128}, concurrency=[1])
    done = subprocess.run(
        [SNAKEMAKE, "--profile", "profiles/local-pairs", "all", "--configfile",
         "config/examples/two-pairs.yaml", "--replace-workflow-config"],
        cwd=work, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    one_stream = {**FULL, "cells": 2}
    assert_pairs_took_turns(job_times(work), {"north": one_stream, "south": one_stream})
    assert our_namespaces() == []
    assert "one pair in this run" not in (work / "results/tables/pairs.md").read_text()
