"""The findings' first table: per model and link, each context's decode and prefill
cost with its ±, and why, drawn from the run's link comparison."""

from __future__ import annotations

import numpy as np

from splitbench.findings import glance
from tests.support.comparison_rows import comp_rows


def test_a_row_per_model_and_link_with_each_context_and_why():
    rows = comp_rows("usb4", [(0.55, 0.03), (0.57, 0.05)], latency=(0.58, 0.07),
                     bandwidth=(0.0, 0.0), trips=1.02, gap_us=568.0)
    rows = rows.assign(prefill_change_pct=[-40.0, -50.0], prefill_change_unc_pct=[3.0, 2.0])
    table = glance.table(glance.figures(rows, ["short", "5k", "32k"]), ["short", "5k", "32k"])
    assert list(table.columns) == ["model", "link", "decode Δ ms/token, short",
                                   "decode Δ ms/token, 5k", "prefill Δ, short",
                                   "prefill Δ, 5k", "why (its first context)"]
    row = table.iloc[0]
    assert (row["decode Δ ms/token, short"], row["prefill Δ, 5k"]) == ("+0.55 ±0.03", "-50% ±2%")
    assert row["why (its first context)"] == \
        "short: 1.02 round trips × +568 µs: +0.58 ±0.07 predicted, agrees"


def test_a_failed_cell_a_flagged_one_and_a_prediction_that_disagrees_are_marked():
    rows = comp_rows("slow", [(0.90, 0.03), (0.57, 0.05), (np.nan, np.nan)],
                     latency=(0.30, 0.02), trips=1.0, gap_us=300.0,
                     statuses=["ok", "ok", "crash"])
    rows["flags"] = [None, "interference: 1.2 cores", None]
    table = glance.table(glance.figures(rows, ["short", "5k", "32k"]), ["short", "5k", "32k"])
    row = table.iloc[0]
    assert row["decode Δ ms/token, 32k"] == "✗"
    assert row["decode Δ ms/token, 5k"] == "+0.57 ±0.05 ⚠"
    assert row["why (its first context)"].endswith("predicted, ⚠ disagrees")


def test_nothing_compared_writes_no_table():
    assert glance.markdown([], ["short"]) == ""
    nothing = glance.figures(comp_rows("x", []), ["short"])
    assert nothing == [] and glance.markdown(nothing, ["short"]) == ""
