"""benchmarks/coverage.py --calibrate --pool: two batches of A/A runs as one calibration."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest

from splitbench.summary import between_runs
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def coverage():
    spec = importlib.util.spec_from_file_location("coverage_bench",
                                                  ROOT / "benchmarks" / "coverage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def batch(measured, runs, cell_term, kind_term, slope):
    return {"mode": "embedded", "runs": runs, "measured": measured, "machine": "2 cores",
            "cell_dof": runs - 1, "dof": 10 * (runs - 1),
            "figures": {"prefill_tps": {"single": kind_term}},
            "cells": {"lab/5gbe/synth/short/1": {"prefill_tps": cell_term}},
            "prediction": {"slope_rel_sd": slope, "model_error_ms": 0.04}}


def test_pooled_terms_average_the_batches_variances_by_their_degrees_of_freedom(coverage):
    first = batch("2026-12-01", 6, 0.03, 0.02, 0.006)
    second = batch("2026-12-07", 3, 0.06, 0.05, 0.0)
    second["cells"]["lab/usb4/synth/5k/1"] = {"decode_ms": 0.2}  # one batch only
    both = coverage.pooled(first, second)
    # (5 x 0.03^2 + 2 x 0.06^2) / 7, root: between the two, nearer the larger batch.
    assert both["cells"]["lab/5gbe/synth/short/1"]["prefill_tps"] == pytest.approx(
        ((5 * 0.03 ** 2 + 2 * 0.06 ** 2) / 7) ** 0.5, abs=1e-5)
    assert both["figures"]["prefill_tps"]["single"] == pytest.approx(
        ((50 * 0.02 ** 2 + 20 * 0.05 ** 2) / 70) ** 0.5, abs=1e-5)
    assert both["cells"]["lab/usb4/synth/5k/1"] == {"decode_ms": 0.2}
    assert both["prediction"]["slope_rel_sd"] == pytest.approx((5 * 0.006 ** 2 / 7) ** 0.5,
                                                               abs=1e-4)
    assert (both["runs"], both["cell_dof"], both["dof"]) == (9, 7, 70)
    assert both["batches"] == [{"measured": "2026-12-01", "runs": 6},
                               {"measured": "2026-12-07", "runs": 3}]
    # A third batch adds to the list; it does not forget the first two.
    third = coverage.pooled(both, batch("2026-12-08", 6, 0.03, 0.02, 0.006))
    assert [b["runs"] for b in third["batches"]] == [6, 3, 6]


def test_one_runs_inflated_error_does_not_cancel_the_run_to_run_term(coverage):
    """A cell's term is its spread across runs less a typical run's own standard error:
    one run whose bootstrap error blew up (a stalled request drawn twice) is not
    averaged in, where it would cancel a spread the other runs' errors do not hold."""
    values = pd.Series([3.2, 3.4, 3.6, 3.3, 3.5, 3.4])
    quiet = pd.Series([0.05] * 6)
    spread = values.std(ddof=1)
    # Median of the squares: sqrt(var - 0.05 ** 2), relative to the mean of 3.4.
    expected = (spread ** 2 - 0.05 ** 2) ** 0.5 / 3.4
    assert coverage._excess(values, quiet, False) == pytest.approx(expected)
    one_blown = pd.Series([0.05] * 5 + [1.2])
    assert coverage._excess(values, one_blown, False) == pytest.approx(expected)
    # Where most runs' own errors hold the spread, nothing is left over.
    assert coverage._excess(values, pd.Series([0.3] * 6), False) == 0.0
    # An absolute term (the overlap's) is not divided by the mean.
    assert coverage._excess(values, quiet, True) == pytest.approx(expected * 3.4)
    assert coverage._excess(values.iloc[:1], quiet.iloc[:1], False) is None


def test_pooled_paces_weigh_each_cells_mean_by_runs_and_widen_the_range(coverage):
    first = {"runs": 6, "pace": {"levels": {"a": 1.0, "b": 2.0}, "runs": [-0.04, 0.05]}}
    second = {"runs": 3, "pace": {"levels": {"a": 1.3, "c": 4.0}, "runs": [-0.08, 0.02]}}
    pace = between_runs.pooled_pace(first, second)
    assert pace["levels"] == {"a": pytest.approx(1.1), "b": 2.0, "c": 4.0}
    assert pace["runs"] == [-0.08, 0.05]
    assert between_runs.pooled_pace({"runs": 6}, second) == second["pace"]


def test_a_calibrations_pace_is_each_cells_mean_and_the_runs_range(coverage):
    stacked = pd.DataFrame({
        "pair": "lab", "link": ["x", "y", "x", "y"], "model": "m", "ctx": "short",
        "conc": 1, "run": [0, 0, 1, 1], "decode_ms_per_token": [0.9, 1.8, 1.1, 2.2]})
    pace = between_runs.pace_of(stacked, ["pair", "link", "model", "ctx", "conc"])
    assert pace["levels"] == {"lab/x/m/short/1": 1.0, "lab/y/m/short/1": 2.0}
    # Run 0 took 10% less time on both cells, run 1 10% more.
    assert pace["runs"] == [-0.1, 0.1]
