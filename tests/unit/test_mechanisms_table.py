"""The mechanisms table on hand-made matrices: the fits of decode's cost on the links'
latency and of prefill on their bandwidth, and what they can and cannot carry."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splitbench.compare import mechanisms
from splitbench.infra import fits
from splitbench.summary import cell_summary
from tests.support.comparison_rows import compared
from tests.support.matrices import ORDER, cell

# ---------------------------------------------------------------- mechanisms


def links(**latency_us: float) -> pd.DataFrame:
    return pd.DataFrame([{"pair": "lab", "link": name, "rr_fixed_us": us,
                          "rr16k_p50_us": us + 50, "a_to_b_gbps": 10.0 / (1 + i)}
                         for i, (name, us) in enumerate(latency_us.items())])


def matrix(delta_ms, prefill_of) -> pd.DataFrame:
    """Cells on three links whose decode delta is delta_ms(latency difference in ms,
    context) and whose prefill is prefill_of(relative bandwidth change)."""
    facts = links(baseline=100.0, x=600.0, y=1100.0).set_index("link")
    rows = []
    for name, fact in facts.iterrows():
        dl = (fact["rr_fixed_us"] - facts.loc["baseline", "rr_fixed_us"]) / 1000
        db = fact["a_to_b_gbps"] / facts.loc["baseline", "a_to_b_gbps"] - 1
        for ctx, base_ms in [("short", 10.0), ("long", 30.0)]:
            rows.append(cell(name, ctx, decode_ms=base_ms + delta_ms(dl, ctx), se=0.01,
                             prefill=1000.0 * (1 + prefill_of(db))))
    return pd.DataFrame(rows)


def test_fit_through_origin():
    fit = fits.fit_through_origin([1, 2, 3], [2, 4, 6.3])
    assert fit["slope"] == pytest.approx((2 + 8 + 18.9) / 14)
    assert 0.99 < fit["r2"] <= 1 and fit["n"] == 3
    assert np.isnan(fits.fit_through_origin([1, 1], [2, 3])["r2"])
    assert np.isnan(fits.fit_through_origin([], [])["slope"])


def test_fixed_cost_decode_and_compute_bound_prefill():
    summary = matrix(lambda dl, ctx: 2 * dl, lambda db: 0.05 * db)
    table = mechanisms.table(summary,
                             compared(summary), links(baseline=100.0, x=600.0, y=1100.0), ORDER)
    decode, prefill = table.iloc[0], table.iloc[1]
    assert decode["slope"] == pytest.approx(2.0)
    assert decode["R²"] == pytest.approx(1.0)
    assert decode["points"] == 4 and decode["links"] == 2
    assert decode["verdict"].startswith("decode pays ~2.0 ±0.0 round trips")
    assert "a lower bound" in decode["verdict"]  # no anchors: sequential, no drift known
    assert "fixed per-token cost" in decode["verdict"]
    assert prefill["slope"] == pytest.approx(0.05)
    assert prefill["verdict"].startswith("prefill insensitive to bandwidth above 3.33 Gbit/s")


STEADY = pd.DataFrame({"pair": ["lab"], "model": ["m"], "drift_decode_rel": [0.0],
                       "drift_prefill_rel": [0.0]})


def test_delta_growing_with_context_and_bandwidth_bound_prefill():
    summary = matrix(lambda dl, ctx: dl * (1 if ctx == "short" else 3), lambda db: db)
    facts = links(baseline=100.0, x=600.0, y=1100.0)
    table = mechanisms.table(summary, compared(summary, drift=STEADY), facts, ORDER)
    assert table.iloc[0]["verdict"].startswith(
        "no single number of round trips: the cost per token changes with context "
        "(short 1.0 ±0.2, long 3.0 ±0.2")
    # The same data with only lower-bound uncertainties (the machine's drift unknown)
    # cannot claim the contexts differ: one number explains it poorly, and says so.
    unknown = mechanisms.table(summary, compared(summary), facts, ORDER).iloc[0]["verdict"]
    assert unknown.startswith("not resolvable on this data")
    assert table.iloc[1]["slope"] == pytest.approx(1.0)
    assert table.iloc[1]["verdict"].startswith("prefill tracks one-way bandwidth")


def test_a_fit_the_data_cannot_carry_gives_no_number():
    """Noise as a result: deltas that fall with latency (negative round trips), or that
    scatter around zero, give "not resolvable on this data" with the reason."""
    falling = matrix(lambda dl, ctx: -6 * dl, lambda db: -0.8 * db)
    table = mechanisms.table(falling,
                             compared(falling), links(baseline=100.0, x=600.0, y=1100.0), ORDER)
    decode, prefill = table.iloc[0]["verdict"], table.iloc[1]["verdict"]
    assert decode.startswith("not resolvable on this data: the slope is -6.00")
    assert "negative round trips are impossible" in decode and "round trips of" not in decode
    assert prefill.startswith("not resolvable on this data: prefill falls as bandwidth rises")
    noise = {("x", "short"): 0.4, ("x", "long"): -0.5, ("y", "short"): -0.3,
             ("y", "long"): 0.45}
    scattered = matrix(lambda dl, ctx: 0.0, lambda db: 0.0)
    for (link, ctx), delta in noise.items():
        where = (scattered["link"] == link) & (scattered["ctx"] == ctx)
        scattered.loc[where, "decode_ms_per_token"] += delta
        scattered.loc[where, "decode_ms_se"] = 0.3
    verdict = mechanisms.table(scattered,
                               compared(scattered),
                               links(baseline=100.0, x=600.0, y=1100.0), ORDER).iloc[0]["verdict"]
    assert verdict.startswith("not resolvable on this data")
    assert "not resolvable from zero" in verdict


def test_one_link_at_one_context_says_its_fit_has_one_point():
    """Two links (the baseline and one other) at one context: the prefill fit has one
    point, and the findings quote why whole (beside busy loops it read "(0.03 has no
    uncertainty)" with the reason's "one point" cut off)."""
    one = matrix(lambda dl, ctx: 0.5 * dl, lambda db: 0.3 * db)
    one = one[one["link"].isin(["baseline", "x"]) & (one["ctx"] == "short")]
    table = mechanisms.table(one, compared(one), links(baseline=100.0, x=600.0), ["short"])
    prefill = table.set_index("mechanism").loc["prefill", "verdict"]
    assert "not resolvable on this data: one point only: its slope" in prefill, prefill
    reason = prefill.split(": ", 1)[-1].split(" (")[0]  # as the findings quote it
    assert reason.startswith("one point only: its slope") and reason.endswith(
        "has no uncertainty"), reason


def test_latency_figure_choice():
    assert cell_summary.latency_column(links(a=1.0)) == "rr_fixed_us"
    no_fit = links(a=1.0).assign(rr_fixed_us=np.nan)
    assert cell_summary.latency_column(no_fit) == "rr16k_p50_us"
