"""A paired cell's figures: the median of its rounds' differences against the baseline
link's requests beside them, what its decode turns waited against the probe's latency,
and no paired figures where the reference never answered."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splitbench.compare import comparison
from splitbench.infra import intervals
from splitbench.report import tables
from splitbench.summary import cell_summary
from tests.support import write_cell
from tests.support.comparison_rows import compared
from tests.support.matrices import CONTEXTS, ORDER, cell, comparison_row, frame, request


def paired_rows(deltas: list[float], ref_ms: float = 1.0,
                rr_us: tuple[float, float] = (50.0, 250.0)) -> list[dict]:
    """A paired cell's request rows: per round two reference requests (the baseline
    link) and two of the link, the link slower by that round's delta; each run's
    latency measured after it (reference, link; the link's a little more each round)."""
    rows, i = [], 0
    for round_, delta in enumerate(deltas):
        for reference, ms, rr in ((True, ref_ms, rr_us[0]),
                                  (False, ref_ms + delta, rr_us[1] + round_)):
            for _ in range(2):
                rows.append(request(i, [ms] * 8, reference=reference, round=round_,
                                    ttft_ms=10.0 if reference else 11.0, rr64_us=rr))
                i += 1
    return rows


def summarized(tmp_path, rows: list[dict]) -> pd.DataFrame:
    """The summary of a baseline cell and link x's paired cell of these rows."""
    paths = [write_cell(tmp_path, "baseline", "short", 1, [request(0, [1.5] * 8)]),
             write_cell(tmp_path, "x", "short", 1, rows)]
    return cell_summary.summarize(paths, CONTEXTS)


def predicted(comp: pd.DataFrame) -> pd.DataFrame:
    """The prediction at one round trip a token, the probe reading 50 and 250 us."""
    trips = pd.DataFrame({"pair": ["lab"], "model": ["m"], "workers": [1],
                          "round_trips": [1.0], "round_trips_se": [0.0]})
    links = pd.DataFrame({"pair": ["lab", "lab"], "link": ["baseline", "x"],
                          "rr64_p50_us": [50.0, 250.0]})
    return comparison.predicted_decode_delta(comp, links, trips, {})


def test_a_paired_cell_gives_the_median_of_its_round_differences(tmp_path):
    deltas = [0.20, 0.25, 0.15, 0.22, 0.18]
    paths = [write_cell(tmp_path, "baseline", "short", 1, [request(0, [1.5] * 8)]),
             write_cell(tmp_path, "x", "short", 1, paired_rows(deltas))]
    summary = cell_summary.summarize(paths, CONTEXTS)
    x = summary.set_index("link").loc["x"]
    assert x["paired_rounds"] == 5
    assert x["paired_decode_delta_ms"] == pytest.approx(0.20)
    assert x["paired_decode_delta_se"] == pytest.approx(
        1.2533 * np.std(deltas, ddof=1) / np.sqrt(5))
    assert x["paired_prefill_change_pct"] == pytest.approx((10 / 11 - 1) * 100)
    # The cell's own figures come from its own requests only (not the reference's).
    assert x["decode_ms_per_token"] == pytest.approx(1.20)
    row = comparison_row(tables.link_comparison(summary,
                                                compared(summary, baseline="baseline"),
                                                ORDER), "x", "short")
    # The baseline measured alongside (1.0), not the baseline's own cell (1.5).
    assert row["decode base (ms/token)"] == "1.00"
    # A 95% interval: Student's t at the 5 rounds' 4 degrees of freedom (2.78), not 2.
    se = 1.2533 * np.std(deltas, ddof=1) / np.sqrt(5)
    assert row["decode Δ (ms/token)"] == f"+0.20 ±{intervals.t_factor(4) * se:.2f}" \
        == "+0.20 ±0.06"
    assert row["compared"] == "paired (5 rounds)"
    # The latency each round measured: 200-204 us more on the link, median 202.
    assert x["paired_rr64_delta_us"] == pytest.approx(202.0)
    trips = pd.DataFrame({"pair": ["lab"], "model": ["m"], "workers": [1],
                          "round_trips": [1.0], "round_trips_se": [0.0]})
    stale = pd.DataFrame({"pair": ["lab", "lab"], "link": ["baseline", "x"],
                          "rr64_p50_us": [50.0, 950.0]})  # the link checks' (minutes ago)
    comp = comparison.compare_links(summary, "baseline")
    guess = comparison.predicted_decode_delta(comp, stale, trips, {})
    assert guess["predicted_decode_delta_ms"].iloc[0] == pytest.approx(0.202)
    assert guess["latency_from"].iloc[0] == comparison.LATENCY_FROM_PROBE


def test_what_the_decode_turns_waited_in_each_round_stands_beside_the_probe(tmp_path):
    """A cell whose packets timed its decode turns: each round's difference of their
    median waits (link minus baseline) is carried beside the prediction as a witness;
    the prediction's latency stays the 64 B probe's of the same rounds (the waits hold
    B's own work on each message, milliseconds of spread on a real model)."""
    rows = paired_rows([0.40, 0.42, 0.38, 0.41, 0.39])
    for row in rows:  # the baseline's turns waited 300 us; the link's 700-704 us
        row["rpc_turn_wait_us"] = 300.0 if row["reference"] else 700.0 + row["round"]
    summary = summarized(tmp_path, rows)
    x = summary.set_index("link").loc["x"]
    assert x["paired_turn_wait_delta_us"] == pytest.approx(402.0)
    assert x["paired_rr64_delta_us"] == pytest.approx(202.0)
    guess = predicted(comparison.compare_links(summary, "baseline")).iloc[0]
    assert guess["latency_from"] == comparison.LATENCY_FROM_PROBE
    assert guess["latency_delta_us"] == pytest.approx(202.0)
    assert guess["turn_wait_delta_us"] == pytest.approx(402.0)
    assert guess["turn_wait_delta_unc_us"] == pytest.approx(
        intervals.t_factor(4) * 1.2533 * np.std([400.0, 401, 402, 403, 404], ddof=1)
        / np.sqrt(5))


def test_host_a_own_time_is_the_step_less_its_turns_waits(tmp_path):
    """Each request's decode step less what its turns waited is host A's own time; the
    paired cell carries the median of each round's difference (link less baseline)
    beside the waits, and where it is resolved the table's verdict names it."""
    deltas = [0.060, 0.062, 0.058, 0.061, 0.059]
    rows = paired_rows(deltas)
    for row in rows:  # 1 turn a token; A's own time 900 us, on the link 35 us less
        row["rpc_turns_per_token"] = 1.0
        row["rpc_turn_wait_us"] = 100.0 if row["reference"] else \
            1000.0 + 1000 * deltas[row["round"]] - 865.0
    summary = summarized(tmp_path, rows)
    x = summary.set_index("link").loc["x"]
    # A's own time: the step (1.0 ms, 1.0 + delta on the link) less the wait.
    assert x["paired_a_time_delta_us"] == pytest.approx(-35.0)
    assert x["paired_a_time_delta_se"] == pytest.approx(0.0, abs=1e-9)
    guess = predicted(comparison.compare_links(summary, "baseline")).iloc[0]
    assert guess["a_time_delta_us"] == pytest.approx(-35.0)
    assert comparison.host_a_change(guess) == pytest.approx((-35.0, 0.0), abs=1e-9)
    # The probe's 202 us predicts +0.20 where +0.06 was measured: the verdict says what
    # host A's own time did beside it.
    table = tables.link_comparison(summary,
                                   compared(summary, baseline="baseline", prediction=predicted),
                                   ORDER)
    verdict = comparison_row(table, "x", "short")["measured vs predicted"]
    assert verdict.startswith("⚠ disagrees by -0.14"), verdict
    assert verdict.endswith("; host A's own time per token -0.04 ±0.00"), verdict
    # Unresolved (inside its ±) or not measured: nothing said of it.
    assert comparison.host_a_change({"a_time_delta_us": -5.0,
                                     "a_time_delta_unc_us": 8.0}) is None
    assert comparison.host_a_change({"a_time_delta_us": float("nan"),
                                     "a_time_delta_unc_us": 8.0}) is None

def test_the_prediction_from_measured_latency_is_checked():
    summary = frame(cell("baseline", "short", decode_ms=1.0, se=0.01,
                         uncertainty_from="requests"),
                    cell("x", "short", decode_ms=1.5, se=0.01, uncertainty_from="requests"),
                    cell("y", "short", decode_ms=1.2, se=0.01, uncertainty_from="requests"))
    steady = pd.DataFrame({"pair": ["lab"], "model": ["m"], "drift_decode_rel": [0.0],
                           "drift_prefill_rel": [0.0]})
    links = pd.DataFrame({"pair": ["lab"] * 3, "link": ["baseline", "x", "y"],
                          "rr64_p50_us": [50.0, 500.0, 500.0]})
    trips = pd.DataFrame({"pair": ["lab"], "model": ["m"], "workers": [1],
                          "round_trips": [1.1], "round_trips_se": [0.02]})

    def predict(rows: pd.DataFrame) -> pd.DataFrame:
        return comparison.predicted_decode_delta(rows, links, trips, {})

    comp = compared(summary, baseline="baseline", drift=steady, prediction=predict)
    table = tables.link_comparison(summary, comp, ORDER)
    # 1.1 round trips x 0.45 ms = +0.495 ±0.018 predicted for both links.
    x, y = comparison_row(table, "x", "short"), comparison_row(table, "y", "short")
    # No bytes per token measured: the prediction is latency alone, and says so.
    assert x["predicted Δ (ms/token)"] == y["predicted Δ (ms/token)"] == (
        "+0.50 ±0.02 (latency only: the bandwidth term is unknown)")
    assert x["measured vs predicted"].startswith("agrees")
    assert y["measured vs predicted"].startswith("⚠ disagrees by -0.30")


def test_a_paired_cell_whose_reference_never_answered_has_no_paired_figures(tmp_path):
    rows = [request(0, [1.0] * 8, reference=True, round=0, status="crash"),
            *[request(i, [1.2] * 8, reference=False, round=0) for i in (1, 2, 3)]]
    summary = cell_summary.summarize([write_cell(tmp_path, "x", "short", 1, rows)], CONTEXTS)
    row = summary.iloc[0]
    assert row["status"] == "ok" and row["decode_ms_per_token"] == pytest.approx(1.2)
    assert np.isnan(row["paired_decode_delta_ms"])
