"""Several pairs in one run: every table and chart keeps each pair's cells apart, a link
is compared with its own pair's baseline, and the pairs table and chart set the pairs
side by side on what they both measured.

The fixture: two pairs of machines, `lab` and `far`, each with a baseline and a `slow`
link; far's machine is twice as slow and its links were checked without the probe's
payload sweep (no `rr_fixed_us`, only the 16 KB p50). Only `lab` measured the long
context at concurrency 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import vl_convert as vlc

from splitbench.compare import comparison, mechanisms, pairs
from splitbench.infra import intervals, tables_io
from splitbench.report import charts, side_by_side, table_files, tables
from tests.support import stages
from tests.support.comparison_rows import compared

CONTEXTS = {"short": 128, "long": 4096}
ORDER = ["short", "long"]
SPEED = {"lab": 1.0, "far": 2.0}  # far's compute takes twice as long
LATENCY_US = {("lab", "baseline"): 100.0, ("lab", "slow"): 600.0,
              ("far", "baseline"): 200.0, ("far", "slow"): 1200.0}
ROUND_TRIPS = 2.0


def decode_ms(pair: str, link: str, ctx: str) -> float:
    compute = (1.0 if ctx == "short" else 3.0) * SPEED[pair]
    return compute + ROUND_TRIPS * LATENCY_US[(pair, link)] / 1000


def two_pairs(*, failed: tuple = (), flagged: tuple = ()) -> pd.DataFrame:
    """The two pairs' summary; `failed` and `flagged` cells as (pair, link, ctx, conc)."""
    rows = []
    for pair in SPEED:
        for link in ("baseline", "slow"):
            for ctx in ORDER:
                for conc in (1, 2):
                    if pair == "far" and ctx == "long" and conc == 2:
                        continue  # only the lab measured it
                    key = (pair, link, ctx, conc)
                    ok = key not in failed
                    ms = decode_ms(pair, link, ctx) * conc
                    rows.append({
                        "pair": pair, "link": link, "model": "m", "ctx": ctx, "conc": conc,
                        "ctx_tokens": CONTEXTS[ctx], "status": "ok" if ok else "crash",
                        "decode_ms_per_token": ms if ok else np.nan,
                        "decode_tps": 1000 / ms if ok else np.nan,
                        "decode_ms_se": 0.01 * ms, "uncertainty_from": "requests",
                        "samples": 5,
                        "prefill_tps": 1000.0 / SPEED[pair] if ok else np.nan,
                        "prefill_tps_se": 10.0,
                        "ttft_ms": CONTEXTS[ctx] * SPEED[pair] if ok else np.nan,
                        "ttft_ms_se": 1.0,
                        "prompt_tokens": CONTEXTS[ctx],
                        "server_prefill_tps": 1000.0 / SPEED[pair] if ok else np.nan,
                        "overlap": 0.9 if conc > 1 and ok else np.nan,
                        "throughput_tps": conc * 1000 / ms if ok else np.nan,
                        "flags": "host A: CPU pressure 60% (limit 50%) during the cell"
                        if key in flagged else None,
                    })
    return pd.DataFrame(rows)


def two_pairs_links() -> pd.DataFrame:
    rows = []
    for (pair, link), us in LATENCY_US.items():
        gbps = 10.0 if link == "baseline" else 5.0
        rows.append({
            "pair": pair, "link": link, "a_to_b_gbps": gbps, "a_to_b_gbps_min": gbps - 0.2,
            "a_to_b_gbps_max": gbps + 0.2, "b_to_a_gbps": gbps, "b_to_a_gbps_min": gbps,
            "b_to_a_gbps_max": gbps, "bidir_gbps": 2 * gbps, "ping_ms": us / 2000,
            "rr64_p50_us": us, "rr16k_p50_us": us,
            # far's links were checked without the payload sweep: no fixed overhead.
            "rr_fixed_us": us if pair == "lab" else np.nan,
            "foreign_cpu_a_cores": 0.0, "foreign_cpu_b_cores": 0.0,
            "flags": "throughput below half the negotiated rate"
            if (pair, link) == ("far", "slow") else None,
        })
    return pd.DataFrame(rows)


def spec_data(chart) -> pd.DataFrame:
    spec = chart.to_dict()
    return pd.DataFrame(next(iter(spec["datasets"].values())))


# ---------------------------------------------------------------- comparisons per pair


def test_each_link_is_compared_with_its_own_pair_s_baseline():
    comp = compared(two_pairs(), baseline="baseline")
    table = tables.link_comparison(two_pairs(), comp, ORDER).set_index(["pair", "ctx"])
    for pair in SPEED:
        for ctx in ORDER:
            row = table.loc[(pair, ctx)]
            assert row["decode base (ms/token)"] == f"{decode_ms(pair, 'baseline', ctx):.2f}"
            delta = decode_ms(pair, "slow", ctx) - decode_ms(pair, "baseline", ctx)
            assert row["decode Δ (ms/token)"].startswith(f"+{delta:.2f} ±")


def test_a_pair_without_its_baseline_cell_is_not_compared_with_another_pair_s():
    summary = two_pairs(failed=(("far", "baseline", "short", 1),))
    table = tables.link_comparison(summary,
                                   compared(summary, baseline="baseline"),
                                   ORDER).set_index(["pair", "ctx"])
    assert table.loc[("far", "short"), "decode Δ (ms/token)"] == "baseline ✗ crash"
    assert table.loc[("lab", "short"), "decode Δ (ms/token)"].startswith("+1.00")


def test_per_link_tables_keep_each_pair_s_rows():
    summary = two_pairs(failed=(("far", "slow", "short", 2),))
    decode = tables.single_stream_decode(summary, ORDER).set_index(["pair", "link"])
    assert decode.loc[("lab", "baseline"), "short"] == f"{1000 / 1.2:.1f}"
    assert decode.loc[("far", "baseline"), "short"] == f"{1000 / 2.4:.1f}"
    boundary = tables.concurrency_boundary(summary, ORDER).set_index(["pair", "link"])
    assert boundary.loc[("far", "slow"), "short"] == "1 (crashes at 2)"
    assert boundary.loc[("lab", "slow"), "short"] == "2"
    assert boundary.loc[("far", "slow"), "long"] == "1"  # level 2 not measured there
    overlap = tables.overlap_table(summary, ORDER).set_index(["pair", "link"])
    assert overlap.loc[("far", "slow"), "short"] == "✗ crash"
    assert overlap.loc[("lab", "slow"), "short"] == "0.9"
    assert len(tables.ttft_table(summary, ORDER)) == 2 * 2 * 2


def test_each_pair_is_fitted_with_its_own_latency_figure():
    """far's links have no payload-sweep fit: its round trips come from its own 16 KB
    figure, not from lab's choice of the fixed overhead (which far lacks)."""
    comp = compared(two_pairs(), baseline="baseline")
    table = mechanisms.table(two_pairs(), comp, two_pairs_links(), ORDER)
    decode = table[table["mechanism"] == "decode"].set_index("pair")
    for pair in SPEED:
        assert decode.loc[pair, "slope"] == pytest.approx(ROUND_TRIPS), pair
        assert decode.loc[pair, "verdict"].startswith("decode pays ~2.0")
    assert "rr16k_p50_us" in decode.loc["far", "against"]
    assert "rr_fixed_us" in decode.loc["lab", "against"]


def test_the_prediction_takes_each_pair_s_own_latency_and_round_trips():
    comp = comparison.compare_links(two_pairs(), "baseline")
    trips = pd.DataFrame({"pair": ["lab", "far"], "model": ["m", "m"], "workers": [1, 1],
                          "round_trips": [2.0, 3.0], "round_trips_se": [0.0, 0.0]})
    guess = comparison.predicted_decode_delta(comp, two_pairs_links(), trips, {})
    by_pair = dict(zip(comp["pair"], guess["predicted_latency_ms"], strict=True))
    assert by_pair["lab"] == pytest.approx(2.0 * 0.5)
    assert by_pair["far"] == pytest.approx(3.0 * 1.0)


# ---------------------------------------------------------------- charts per pair


def test_line_charts_give_each_pair_its_own_row_of_panels():
    """Two pairs' links of one name never share a panel: a line is one pair's link."""
    summary = two_pairs()
    for name in ("decode_ms_per_token", "prefill_tps", "decode_delta"):
        chart = charts.build(summary, two_pairs_links(), "baseline",
                             comparison=compared(summary, "baseline"))[name]
        spec = chart.to_dict()
        assert spec["facet"]["row"]["field"] == "pair", name
        assert spec["facet"]["column"]["field"] == "model", name
        assert "<svg" in vlc.vegalite_to_svg(spec)
    one = charts.decode_ms_per_token(summary[summary["pair"] == "lab"]).to_dict()
    assert one["facet"]["field"] == "model"  # one pair: one panel per model, as before


def test_the_delta_chart_subtracts_each_pair_s_own_baseline():
    delta = charts.delta_vs_baseline(two_pairs(), compared(two_pairs(), "baseline")
                                     ).set_index(["pair", "ctx"])
    assert delta.loc[("lab", "short"), "delta_ms"] == pytest.approx(1.0)
    assert delta.loc[("far", "short"), "delta_ms"] == pytest.approx(2.0)


def test_failed_cells_are_named_with_their_pair():
    summary = two_pairs(failed=(("far", "slow", "long", 1),))
    title = json.dumps(charts.decode_ms_per_token(summary).to_dict()["title"])
    assert "far/slow/m/longx1: crash" in title


def test_the_latency_chart_fits_and_draws_each_pair_apart():
    summary, links = two_pairs(), two_pairs_links()
    table = mechanisms.table(summary, compared(summary, baseline="baseline"), links, ORDER)
    chart = charts.decode_vs_latency(summary, links, "baseline", table)
    spec = chart.to_dict()
    assert spec["facet"]["row"]["field"] == "pair"
    data = spec_data(chart)
    points = data[data["part"] == "point"]
    # far keeps its points on its own latency figure (the 16 KB p50; it has no fit).
    far = points[points["pair"] == "far"].set_index(["link", "ctx"])
    assert far.loc[("slow", "short"), "latency_ms"] == pytest.approx(1.2)
    assert set(far["latency_from"]) == {"rr16k_p50_us"}
    fits = data[data["part"] == "fit"]
    for (pair, ctx), line in fits.groupby(["pair", "ctx"]):
        assert len(line) == 2, (pair, ctx)  # one segment per pair and context
        x, y = line["latency_ms"].to_numpy(), line["fit_ms"].to_numpy()
        assert (y[1] - y[0]) / (x[1] - x[0]) == pytest.approx(ROUND_TRIPS)
    labels = data[data["part"] == "label"].set_index("pair")["label"]
    assert labels["far"].startswith("slope 2.00") and labels["lab"].startswith("slope 2.00")
    assert "<svg" in vlc.vegalite_to_svg(spec)


# ---------------------------------------------------------------- the pairs table


def test_the_pairs_table_sets_pairs_side_by_side_where_both_measured():
    summary = two_pairs(flagged=(("far", "baseline", "short", 1),),
                        failed=(("lab", "slow", "short", 2),))
    table = side_by_side.pairs_table(summary, two_pairs_links(), ORDER, "baseline")
    # long x 2 only the lab measured: no row; every other cell of both pairs has one.
    assert not ((table["ctx"] == "long") & (table["conc"] == 2)).any()
    assert len(table) == 2 * 2 * 3
    first = table.iloc[:2]
    assert list(first["pair"]) == ["far", "lab"] and set(first["link"]) == {"baseline"}
    rows = table.set_index(["pair", "link", "ctx", "conc"])
    lab = rows.loc[("lab", "baseline", "short", 1)]
    # ± = t at the 5 requests' 4 degrees of freedom (2.78) x the standard error, 1% of 1.2
    t4 = intervals.t_factor(4)
    assert lab["decode (ms/token)"] == f"1.20 ±{t4 * 0.012:.2f}" == "1.20 ±0.03"
    assert lab["decode (tok/s)"] == f"{1000 / 1.2:.1f} ±{t4 * 0.012 * 1000 / 1.2**2:.1f}"
    assert lab["prefill (tok/s)"] == f"1000 ±{t4 * 10:.0f}"
    assert lab["TTFT (ms)"] == f"128 ±{t4 * 1.0:.1f}"
    assert lab["overlap"] == "— (one stream)"
    assert lab["± from"] == "5 requests"
    assert lab["A→B (Gbit/s)"] == "10.00 ±0.20" and lab["B→A (Gbit/s)"] == "10.00"
    assert lab["RR 64 B p50 (µs)"] == "100" and lab["RR 16 KB p50 (µs)"] == "100"
    # A flagged cell's figures carry ⚠; a failed cell shows its failure, never a number.
    far = rows.loc[("far", "baseline", "short", 1)]
    assert far["decode (ms/token)"] == f"2.40 ±{t4 * 0.024:.2f} ⚠"
    assert far["prefill (tok/s)"].endswith(" ⚠")
    crashed = rows.loc[("lab", "slow", "short", 2)]
    assert crashed["decode (ms/token)"] == "✗ crash" and crashed["overlap"] == "✗ crash"
    assert rows.loc[("far", "slow", "short", 2), "overlap"] == "0.9"
    # A flagged link's figures carry ⚠ too.
    assert rows.loc[("far", "slow", "short", 1), "A→B (Gbit/s)"] == "5.00 ±0.20 ⚠"
    note = side_by_side.pairs_note(summary, two_pairs_links(), ORDER, "baseline")
    assert "cell far/baseline/m/short/1: host A: CPU pressure 60%" in note
    assert "link far/slow: throughput below half the negotiated rate" in note
    tables_io.to_markdown(table)


def test_the_pairs_table_says_when_there_is_nothing_to_compare():
    lab = two_pairs().query("pair == 'lab'")
    one = side_by_side.pairs_table(lab, two_pairs_links(), ORDER)
    assert list(one.columns) == ["pairs"] and len(one) == 1
    assert one.iloc[0]["pairs"].startswith("one pair in this run (lab)")
    apart = pd.concat([lab[lab["ctx"] == "short"],
                       two_pairs().query("pair == 'far' and ctx == 'long'")])
    none = side_by_side.pairs_table(apart, two_pairs_links(), ORDER)
    assert none.iloc[0]["pairs"] == ("2 pairs (far, lab), but no model, context and "
                                     "concurrency measured on two or more of them")
    assert side_by_side.pairs_note(lab, two_pairs_links(), ORDER) == ""


def test_every_table_works_on_two_pairs():
    comp = compared(two_pairs(), baseline="baseline")
    every = table_files.tables(two_pairs(), comp, two_pairs_links(), ORDER,
                               baseline_link="baseline")
    assert "pairs" in every and every["pairs"][1]["pair"].nunique() == 2
    for name, (_, table) in every.items():
        if name == "backends":  # one split per shape here: a line that says so
            assert list(table.columns) == ["backends"], table
        elif name != "links":
            assert "pair" in table.columns, name
        tables_io.to_markdown(table)


def test_the_pairs_comparison_orders_and_measures_what_the_pairs_share():
    comp = pairs.compare(two_pairs(), two_pairs_links(), ORDER, "baseline")
    assert list(comp[["ctx", "conc"]].drop_duplicates().itertuples(index=False, name=None)) \
        == [("short", 1), ("short", 2), ("long", 1)]
    far = comp[(comp["pair"] == "far") & (comp["link"] == "slow")].iloc[0]
    assert far["a_to_b_gbps_unc"] == pytest.approx(0.2)
    assert np.isnan(far["b_to_a_gbps_unc"])  # no spread: no ±, never a zero one
    assert far["link_flags"] == "throughput below half the negotiated rate"


# ---------------------------------------------------------------- the pairs chart


def test_the_pairs_chart_draws_each_pair_s_figures_with_their_uncertainty():
    summary = two_pairs(flagged=(("far", "baseline", "short", 1),),
                        failed=(("lab", "slow", "short", 2),))
    chart = charts.build(summary, two_pairs_links(), "baseline")["pairs"]
    spec = chart.to_dict()
    rows = spec["vconcat"][0]["vconcat"]  # one row of panels (a link each) per measure
    assert all(row["facet"]["column"]["field"] == "panel" for row in rows)
    data = pd.concat([pd.DataFrame(spec["datasets"][row["data"]["name"]]) for row in rows])
    scales = {pd.DataFrame(spec["datasets"][row["data"]["name"]])["measure"].iloc[0]:
              row["spec"]["layer"][1]["encoding"]["y"]["scale"] for row in rows}
    assert scales["decode ms/token"]["type"] == "log"  # contexts span orders of magnitude
    assert scales["overlap"] == {"zero": False}  # it can be negative
    decode = data[data["measure"] == "decode ms/token"].set_index(["pair", "link", "cell"])
    row = decode.loc[("lab", "baseline", "short ×1")]
    assert row["value"] == pytest.approx(1.2)
    t4 = intervals.t_factor(4)
    assert (row["lo"], row["hi"]) == pytest.approx((1.2 - t4 * 0.012, 1.2 + t4 * 0.012))
    assert decode.loc[("far", "baseline", "short ×1"), "flag"] == "flagged"
    assert ("lab", "slow", "short ×2") not in decode.index  # failed: not drawn, named
    assert "lab/slow/m/shortx2: crash" in json.dumps(spec["title"])
    assert not (data["cell"] == "long ×2").any()  # only one pair measured it
    svg = vlc.vegalite_to_svg(spec)
    assert "<svg" in svg and charts.CHARTS["pairs"][0] in svg


def test_the_pairs_chart_says_so_with_one_pair():
    lab = two_pairs().query("pair == 'lab'")
    chart = charts.pairs_chart(lab, two_pairs_links())
    assert chart.to_dict()["mark"]["type"] == "text"
    assert "one pair in this run (lab)" in vlc.vegalite_to_svg(chart.to_dict())


# ---------------------------------------------------------------- the aggregate stage


def request_row(request_id: int, gap_ms: float) -> dict:
    """One ok single-stream request as the cells stage writes it: 8 tokens gap_ms apart
    after a 10 ms TTFT on a 128-token prompt, on a quiet machine."""
    return {"request_id": request_id, "status": "ok", "cell_status": "ok", "t_send_ns": 0,
            "t_last_ns": int((10 + 7 * gap_ms) * 1e6), "generated_tokens": 8, "n_predict": 8,
            "prompt_tokens": 128, "ttft_ms": 10.0, "prefill_tps": 12800.0,
            "decode_ms_per_token": gap_ms, "decode_tps": 1000 / gap_ms,
            "decode_ms_se": 0.0, "cell_wall_ms": 10 + 7 * gap_ms, "launch_id": "L",
            "link_fingerprint": "F", "temp_before_c": None, "temp_after_c": None,
            "foreign_cpu_a_cores": 0.0, "foreign_cpu_b_cores": 0.0,
            "cpu_pressure_a_pct": 5.0, "cpu_pressure_b_pct": 5.0}


def test_aggregate_writes_the_pairs_table_with_its_own_note(tmp_path):
    def write(path: Path, rows: list[dict]) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), path)
        return str(path)

    requests, link_files = [], []
    for pair in SPEED:
        for link in ("baseline", "slow"):
            gap = decode_ms(pair, link, "short")
            requests.append(write(
                tmp_path / "cells" / pair / link / "m" / "ctxshort_c1.requests.parquet",
                [request_row(i, gap) for i in range(3)]))
        for row in two_pairs_links().query("pair == @pair").to_dict("records"):
            link_files.append(write(tmp_path / "links" / pair / f"{row['link']}.parquet",
                                    [row]))
    out = tmp_path / "out"
    stages.aggregate(requests, link_files, {"short": 128}, str(out / "summary.parquet"),
                     str(out / "tables"), baseline_link="baseline")
    text = (out / "tables" / "pairs.md").read_text()
    assert text.startswith("## Pairs side by side")
    assert "| m | short | 1 | baseline | far |" in text
    assert "| m | short | 1 | baseline | lab |" in text
    assert "- link far/slow: throughput below half the negotiated rate" in text
    comparison_csv = pd.read_csv(out / "tables" / "link_comparison.csv").set_index("pair")
    assert comparison_csv.loc["lab", "decode base (ms/token)"] == pytest.approx(1.2)
    assert comparison_csv.loc["far", "decode base (ms/token)"] == pytest.approx(2.4)
