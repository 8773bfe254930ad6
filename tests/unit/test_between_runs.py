"""A cell's ± with the machine's run-to-run variation (summary/between_runs.py), the
prediction's own error, and which pairs the lab's calibration is given to."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from splitbench.compare import comparison
from splitbench.configuration import parsed
from splitbench.infra import intervals
from splitbench.matrix import plan
from splitbench.summary import between_runs

CONFIG = Path(__file__).resolve().parents[2] / "config/config.yaml"

CALIBRATION = {
    "mode": "embedded", "runs": 6, "measured": "2026-12-07", "cell_dof": 5, "dof": 80,
    "figures": {"decode_ms": {"single": 0.2, "single/short": 0.04},
                "prefill_tps": {"single": 0.05},
                "paired_decode": {"single": 0.01}},
    "cells": {"lab/x/m/short/1": {"decode_ms": 0.02, "prefill_tps": 0.03,
                                  "paired_decode": 0.006,
                                  "inter_token_latency_ms_p99": 0.1}},
    "prediction": {"slope_rel_sd": 0.01, "model_error_ms": 0.04},
}


def summary() -> pd.DataFrame:
    """Three single-stream cells of 10 requests: one the calibration measured (x at
    short, paired), one it did not at a context it knows (y at short), one at a context
    it does not (y at long)."""
    return pd.DataFrame({
        "pair": "lab", "link": ["x", "y", "y"], "model": "m",
        "ctx": ["short", "short", "long"], "conc": 1, "status": "ok", "samples": 10,
        "decode_ms_per_token": [1.0, 1.0, 3.0], "decode_ms_se": 0.01,
        "decode_ms_unc": intervals.t_factor(9) * 0.01,
        "prefill_tps": 1000.0, "prefill_tps_se": 10.0,
        "prefill_tps_unc": intervals.t_factor(9) * 10.0,
        "paired_decode_delta_ms": [0.5, np.nan, np.nan],
        "paired_decode_delta_se": [0.004, np.nan, np.nan], "paired_rounds": [20, 0, 0]})


def test_a_pair_without_a_calibration_keeps_this_runs_spread_and_says_so():
    out = between_runs.apply(summary(), {})
    assert (out["decode_ms_unc"] == out["decode_ms_unc_run"]).all()
    assert out["unc_scope"].eq(between_runs.THIS_RUN).all()
    assert out["calibration_model_error_ms"].isna().all()


def test_a_calibrated_cell_carries_its_own_term_shrunk_toward_its_kinds():
    out = between_runs.apply(summary(), {"lab": CALIBRATION}).set_index(["link", "ctx"])
    x = out.loc[("x", "short")]
    # decode is absolute: sqrt((0.02^2 + 0.04^2) / 2) ms, at 2 x 5 dof, with the run's own
    # 0.01 ms at 9 dof (Welch).
    term = np.sqrt((0.02 ** 2 + 0.04 ** 2) / 2)
    se, dof = intervals.combined([0.01, term], [9, 10])
    assert x["decode_ms_between_se"] == pytest.approx(term)
    assert x["decode_ms_unc"] == pytest.approx(intervals.halfwidth(se, dof))
    assert x["decode_ms_unc"] > 3 * x["decode_ms_unc_run"]
    # prefill is relative: its cell's 3% and its kind's 5% (no term at short), of 1000.
    prefill = np.sqrt((0.03 ** 2 + 0.05 ** 2) / 2) * 1000
    assert x["prefill_tps_between_se"] == pytest.approx(prefill)
    assert "6 A/A runs (2026-12-07)" in x["unc_scope"]
    # A paired link cost carries its own, in ms/token, at its rounds' 19 dof.
    paired = np.sqrt((0.006 ** 2 + 0.01 ** 2) / 2)
    se, dof = intervals.combined([0.004, paired], [19, 10])
    assert x["paired_decode_unc"] == pytest.approx(intervals.halfwidth(se, dof))


def test_a_cell_the_calibration_did_not_measure_takes_its_kinds_term():
    out = between_runs.apply(summary(), {"lab": CALIBRATION}).set_index(["link", "ctx"])
    # At a context the calibration measured: that context's pooled term, at its dof.
    y = out.loc[("y", "short")]
    assert y["decode_ms_between_se"] == pytest.approx(0.04)
    se, dof = intervals.combined([0.01, 0.04], [9, 80])
    assert y["decode_ms_unc"] == pytest.approx(intervals.halfwidth(se, dof))
    # Elsewhere: the kind's over every context.
    assert out.loc[("y", "long"), "decode_ms_between_se"] == pytest.approx(0.2)


def test_the_link_comparison_reads_a_paired_cost_with_its_run_to_run_term():
    rows = between_runs.apply(summary(), {"lab": CALIBRATION})
    base = rows.iloc[[1]].assign(link="base")
    comp = comparison.compare_links(pd.concat([base, rows.iloc[[0]]]), "base")
    x = comp.set_index("link").loc["x"]
    assert x["decode_delta_unc_ms"] == pytest.approx(rows.iloc[0]["paired_decode_unc"])
    plain = comparison.compare_links(pd.concat([base, summary().iloc[[0]]]), "base")
    assert plain.iloc[0]["decode_delta_unc_ms"] == pytest.approx(
        intervals.halfwidth(0.004, 19))


def test_a_prediction_carries_the_models_own_error_and_is_never_plus_minus_zero():
    """A paired cell whose probe and sweep agree exactly: without a calibration the
    prediction's ± is zero; with one, the model's error (the slope's variation is in
    the round trips' own ±: the next test)."""
    rows = between_runs.apply(summary(), {"lab": CALIBRATION})
    base = rows.iloc[[1]].assign(link="base")
    links = pd.DataFrame({"pair": ["lab", "lab"], "link": ["base", "x"],
                          "rr64_p50_us": [50.0, 550.0]})
    trips = pd.DataFrame({"pair": ["lab"], "model": ["m"], "workers": [1],
                          "round_trips": [1.0], "round_trips_se": [0.0]})
    comp = comparison.compare_links(pd.concat([base, rows.iloc[[0]]]), "base")
    guess = comparison.predicted_decode_delta(comp, links, trips, {}).iloc[0]
    latency = 0.5  # 1 round trip x 500 us
    assert guess["predicted_decode_delta_ms"] == pytest.approx(latency)
    assert guess["predicted_decode_delta_unc_ms"] == pytest.approx(
        intervals.t_factor(np.inf) * 0.04)
    assert f"{guess['predicted_decode_delta_unc_ms']:.2f}" != "0.00"
    bare = comparison.compare_links(pd.concat([base, summary().iloc[[0]]]), "base")
    assert comparison.predicted_decode_delta(bare, links, trips, {}).iloc[0][
        "predicted_decode_delta_unc_ms"] == pytest.approx(0.0)


def test_a_p99_carries_its_cells_run_to_run_term():
    dist = pd.DataFrame({"pair": "lab", "link": ["x", "y"], "model": "m", "ctx": "short",
                         "conc": 1, "metric": "inter_token_latency_ms", "p99": 2.0,
                         "p99_se": 0.05})
    out = between_runs.apply_percentiles(dist, {"lab": CALIBRATION}).set_index("link")
    se, dof = intervals.combined([0.05, 0.1 * 2.0], [np.inf, 5])
    assert out.loc["x", "p99_unc"] == pytest.approx(intervals.halfwidth(se, dof))
    # Not calibrated: its bootstrap's ±.
    assert out.loc["y", "p99_unc"] == pytest.approx(intervals.halfwidth(0.05, np.inf))


def test_the_labs_calibration_is_given_to_embedded_pairs_only(tmp_path):
    path = tmp_path / "between_runs.yaml"
    path.write_text(yaml.safe_dump(CALIBRATION))
    config = parsed(plan.read_yaml(CONFIG))
    assert set(plan.between_runs(config, path)) == {"lab"}
    assert plan.between_runs(config, tmp_path / "none.yaml") == {}
    assert plan.between_runs(config, path)["lab"]["cells"] == CALIBRATION["cells"]
    real = {**CALIBRATION, "mode": "ssh"}
    path.write_text(yaml.safe_dump(real))
    assert plan.between_runs(config, path) == {}


def test_a_concurrent_cells_decode_takes_no_per_token_floor():
    """A concurrent request's gaps hold the other slots' prompts: their dispersion (here
    2 ms a gap) is no floor for the releases' median, whose spread is 0.01 ms."""
    from splitbench.summary import cell_summary

    decode = [10.00, 10.01, 9.99, 10.02, 9.98, 10.00]
    ok = pd.DataFrame({"pair": "lab", "link": "x", "model": "m", "ctx": "5k", "conc": 2,
                       "repeat": 0, "shot": [s for s in range(6) for _ in range(2)],
                       "decode_ms_per_token": [d for d in decode for _ in range(2)],
                       "decode_ms_se": 2.0, "prefill_tps": 1000.0, "ttft_ms": 100.0})
    row = cell_summary._uncertainty(ok).iloc[0]
    spread = intervals.median_se(decode)[0]
    assert row["decode_ms_se"] == pytest.approx(spread)
    assert row["decode_ms_unc"] == pytest.approx(intervals.t_factor(5) * spread)
    # A single stream keeps its tokens' floor.
    single = ok.assign(conc=1, shot=range(12))
    assert cell_summary._uncertainty(single).iloc[0]["decode_ms_se"] == pytest.approx(
        2.0 / np.sqrt(12))


def test_a_swept_round_trip_count_carries_the_slopes_run_to_run_variation(tmp_path):
    """Three rounds of a sweep that fit 2 round trips almost exactly: their own ± is
    tiny; a calibrated pair's count adds the slope's relative spread across A/A runs
    (1% of 2, at the calibration's 5 degrees of freedom), as another run would find."""
    rows = [{"pair": "lab", "model": "m", "workers": 1, "delay_ms": delay,
             "rr_ms": rr, "error": None, "round": r,
             "step_ms_median": 2.0 + 2 * (rr - 0.1) + 0.001 * (r - 1) * delay}
            for r in range(3) for delay, rr in {0.0: 0.1, 1.0: 2.1, 2.0: 4.1}.items()]
    path = tmp_path / "w1.parquet"
    pd.DataFrame(rows).to_parquet(path)
    own = comparison.round_trips([str(path)], summary()).iloc[0]
    calibrated = comparison.round_trips(
        [str(path)], between_runs.apply(summary(), {"lab": CALIBRATION})).iloc[0]
    assert own["round_trips"] == calibrated["round_trips"] == pytest.approx(2.0, abs=0.01)
    se, dof = intervals.combined([own["round_trips_se"], 0.01 * own["round_trips"]],
                                 [own["round_trips_dof"], 5])
    assert calibrated["round_trips_se"] == pytest.approx(se)
    assert calibrated["round_trips_dof"] == pytest.approx(dof)
    assert calibrated["round_trips_se"] > 4 * own["round_trips_se"]


def test_the_models_error_is_a_contexts_own_where_the_calibration_has_one():
    """The lab's model leaves a host-A term out at short that it does not at 5k: a row
    takes its context's term, a context the calibration has none for the pooled one."""
    per_context = {**CALIBRATION, "prediction": {"slope_rel_sd": 0.01, "model_error_ms": 0.04,
                                                 "model_error_ms/short": 0.05}}
    out = between_runs.apply(summary(), {"lab": per_context}).set_index(["link", "ctx"])
    assert out.loc[("x", "short"), "calibration_model_error_ms"] == 0.05
    assert out.loc[("y", "short"), "calibration_model_error_ms"] == 0.05
    assert out.loc[("y", "long"), "calibration_model_error_ms"] == 0.04
    assert (out["calibration_slope_rel_sd"] == 0.01).all()


def test_a_run_outside_the_pace_its_calibration_saw_is_flagged_inside_it_is_not():
    """The calibration's runs spanned -5% to +9% of its cells' mean decode; a run whose
    cells took 20% longer ran on a day the terms did not see."""
    from splitbench.health import checks

    pace = {"levels": {"lab/x/m/short/1": 1.0, "lab/y/m/short/1": 0.8},
            "runs": [-0.05, 0.09]}
    calibrated = {"lab": {**CALIBRATION, "pace": pace}}
    out = between_runs.apply(summary(), calibrated).set_index(["link", "ctx"])
    # x: 1.0 ms against 1.0; y at short: 1.0 against 0.8; y at long: not calibrated.
    assert out.loc[("x", "short"), "calibration_pace"] == pytest.approx(0.0)
    assert out.loc[("y", "short"), "calibration_pace"] == pytest.approx(0.25)
    assert np.isnan(out.loc[("y", "long"), "calibration_pace"])
    (line,) = checks.pace_lines(out.reset_index())
    # The median of 0 and +25%: +12%, beyond +9%.
    assert line == ("flagged", "machine pace: lab's cells took +12% time per decoded token "
                    "against the calibration runs' mean (their own runs spanned -5% to "
                    "+9%): a day they did not see, so each cell's ± may be too narrow; the "
                    "links' costs, differences inside this run, are not affected")
    steady = summary().assign(decode_ms_per_token=[1.02, 0.8, 3.0])
    (line,) = checks.pace_lines(between_runs.apply(steady, calibrated))
    assert line[0] == "ok" and line[1].startswith("machine pace: lab's cells took +1% ")
    # No pace in the calibration (an older file), or no calibration: no line.
    assert checks.pace_lines(between_runs.apply(summary(), {"lab": CALIBRATION})) == []
    assert checks.pace_lines(between_runs.apply(summary(), {})) == []
