"""The two-pairs example as the SLURM and local-pairs tests run it (brief cells, no
interference check), and what they read back: which job of which pair ran when."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import yaml

from tests.conftest import ROOT
from tests.support import namespaces
from tests.support.workflow_run import NO_SOCKPERF, workflow_copy

PAIRS = ("north", "south")


# On this one machine the two pairs share its CPUs by construction: each pair's cells
# and anchors run beside the other pair's servers, and are rightly flagged for it (up to
# "drift check FAILED: the anchor ran under interference" among the run's checks). These
# tests are about who runs when and what is kept, so the copies they run leave
# interference unchecked; the quiet-run tests (test_workflow.py, test_cells_real.py)
# hold the flag to account.
UNCHECKED = {"interference": {"max_cpu_pressure_pct": None, "max_foreign_cpu_cores": None,
                              "max_steal_pct": None}}


# The example's short context only: each pair still runs two links, two blocks, anchors
# and concurrent cells, in half the time.
SHORT = {"short": 128}


# What these tests read is who ran when, not the figures: each cell and anchor sends its
# minimum of requests (no time floor), two paired rounds (the fewest with a spread), one
# iperf3 repeat. A pair job is about a third shorter, and the SLURM plugin, whose status
# checks come 10 s further apart after each round that finds no job done, sees it end
# sooner.
BRIEF_CELLS = {"single_stream_seconds": 0, "concurrent_seconds": 0}


def two_pairs(**changes) -> dict:
    """The two-pairs example with `changes`, interference unchecked (above), its cells
    brief (BRIEF_CELLS)."""
    config = yaml.safe_load((ROOT / "config/examples/two-pairs.yaml").read_text())
    config.update(UNCHECKED, **changes)
    config["link_check"] = {**config["link_check"], **NO_SOCKPERF, "iperf_repeats": 1}
    config["cell"] = {**config["cell"], **BRIEF_CELLS,
                      "paired": {**config["cell"]["paired"], "rounds": 2}}
    return config


def two_pairs_copy(tmp_path: Path, **changes) -> Path:
    """A workflow copy whose config/examples/two-pairs.yaml is `two_pairs(**changes)`."""
    work = workflow_copy(tmp_path)
    (work / "config/examples/two-pairs.yaml").write_text(
        yaml.safe_dump(two_pairs(**changes), sort_keys=False))
    return work


STAMP = re.compile(r"^splitbench: (\S+) (started|ended) at (\d+) ns on (\S+)$", re.M)


def job_times(work: Path) -> pd.DataFrame:
    """Every job on a pair's hardware, when it started and ended, from its own log (each
    such job stamps both: splitbench/cli.py)."""
    rows = []
    for log in (work / "results/logs").rglob("*.log"):
        stamps = {kind: int(ns) for _, kind, ns, _ in STAMP.findall(log.read_text())}
        if stamps:
            pair = log.relative_to(work / "results/logs").parts[1]
            assert set(stamps) == {"started", "ended"}, f"{log}: {stamps}"
            rows.append({"output": str(log), "pair": pair,
                         "stage": log.relative_to(work / "results/logs").parts[0],
                         "start": stamps["started"], "end": stamps["ended"]})
    return pd.DataFrame(rows)


def overlapping(times: pd.DataFrame) -> list[tuple[str, str]]:
    ordered = times.sort_values("start").to_dict("records")
    return [(a["output"], b["output"]) for a, b in zip(ordered, ordered[1:], strict=False)
            if b["start"] < a["end"]]


# What each pair of the two-pairs example runs at its short context.
FULL = {"anchors": 2, "cells": 4, "links": 2, "servers": 2}


def assert_pairs_took_turns(times: pd.DataFrame, jobs: dict[str, dict[str, int]]) -> None:
    """Each pair ran its link checks, launches, cells and anchors (`jobs`: how many of
    each) one at a time; the two pairs ran at the same time (`times`: `job_times`)."""
    for pair in PAIRS:
        mine = times[times["pair"] == pair]
        assert dict(mine["stage"].value_counts()) == jobs[pair], mine
        assert overlapping(mine) == [], f"{pair}: two of its jobs ran at once"
    assert overlapping(times), "the pairs never ran at the same time"


def our_namespaces() -> list[str]:
    return namespaces(*(f"sb-{p}-" for p in PAIRS))
