"""The tiny matrix measured once for the whole session: the end-to-end tests read it, the
re-planning tests dry-run changes against it (tests/workflow/test_replanning.py)."""

from __future__ import annotations

import os

import pytest

from tests.support.workflow_run import (
    RUN_PROCESSES,
    descendants_seen,
    snakemake,
    tiny,
    workflow_copy,
)


@pytest.fixture(scope="session")
def finished(tmp_path_factory):
    """The tiny matrix measured once for real (a session's, not a module's: two modules
    read it, and a run leaves no process behind: test_end_to_end_on_the_embedded_lab
    checks); a test that measures more, or edits the directory, does so in its own
    `run_copy`."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    config = tiny()
    work = workflow_copy(tmp_path_factory.mktemp("e2e"), config)
    with descendants_seen() as seen:
        first = snakemake(work, "all")
    RUN_PROCESSES[work] = seen
    assert first.returncode == 0, first.stderr[-3000:]
    return work, config
