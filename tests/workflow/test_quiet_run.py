"""The tiny run's cells are measured beside nothing of the run's own that counts as
interference: the checks that accept a flagged cell bind only then."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from splitbench.infra import interference
from tests.conftest import needs_root
from tests.support.workflow_run import RUN_PROCESSES


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_quiet_run_flags_none_of_its_cells(finished):
    """The checks above that accept a flagged cell bind only if the run's own servers,
    workers, relays and client are its own work, not interference: a quiet run's cells
    are not flagged. On a machine that is not quiet (a CI host's other work), a cell may
    be flagged for other processes' CPU, and then the flag names the busiest: without
    those that were processes of the run (watched while it ran: Snakemake itself, a few
    hundredths of a core, is not the measurement), the rest is still over the limit."""
    work, config = finished
    summary = pd.read_parquet(work / "results/summary/cells.parquet")
    assert summary["interference_checked"].all(), summary["interference_missing"].tolist()
    flagged = summary[summary["interference"].notna()]
    run_processes = RUN_PROCESSES[work]
    assert len(run_processes) > 10  # snakemake, its jobs, the servers, workers, relays
    limit = interference.settings(config.get("interference"))["max_foreign_cpu_cores"]
    for _, cell in flagged.iterrows():
        said = cell["interference"]
        # Only other processes' CPU, and named: a pressure flag cannot tell whose.
        assert "CPU pressure" not in said and "steal" not in said, said
        named = {int(pid): float(cores) for pid, cores in
                 re.findall(r"\(pid (\d+)\) ([0-9.]+) cores", said)}
        assert named, said
        runs = sum(cores for pid, cores in named.items() if pid in run_processes)
        foreign = max(cell["foreign_cpu_a_cores"], cell["foreign_cpu_b_cores"])
        assert foreign - runs > limit, (said, runs)
