"""Summary and tables on small hand-made matrices: uncertainty, failures, single links,
generic concurrency levels, and the mechanisms' fits."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from splitbench.compare import comparison
from splitbench.infra import intervals, tables_io
from splitbench.report import contents, table_files, tables
from splitbench.summary import between_runs, cell_summary
from tests.support import stages, write_cell
from tests.support.comparison_rows import compared
from tests.support.matrices import (
    CONTEXTS,
    ORDER,
    cell,
    comparison_row,
    frame,
    request,
)

# ---------------------------------------------------------------- request files


def test_summary_carries_per_token_dispersion(tmp_path):
    gaps = [10.0, 12.0, 8.0, 11.0, 9.0]
    path = write_cell(tmp_path, "a", "short", 1, [request(0, gaps)])
    summary = cell_summary.summarize([path], CONTEXTS)
    row = summary.iloc[0]
    assert row["decode_ms_se"] == pytest.approx(np.std(gaps, ddof=1) / np.sqrt(len(gaps)))
    assert row["uncertainty_from"] == "tokens"  # one request: a lower bound
    assert row["repeats"] == 1
    assert np.isnan(row["prefill_tps_se"])


def test_older_files_get_dispersion_from_their_token_file(tmp_path):
    gaps = [5.0, 7.0, 6.0, 9.0]
    row = request(0, gaps)
    del row["decode_ms_se"]
    path = write_cell(tmp_path, "a", "short", 1, [row])
    t_ns = np.cumsum([0.0, *gaps]) * 1e6
    tokens = pa.table({"request_id": [0] * len(t_ns), "token_index": range(len(t_ns)),
                       "t_ns": t_ns.astype("int64")})
    pq.write_table(tokens, path.replace(".requests", ""))
    summary = cell_summary.summarize([path], CONTEXTS)
    assert summary.iloc[0]["decode_ms_se"] == pytest.approx(
        np.std(gaps, ddof=1) / np.sqrt(len(gaps)))


def test_repeats_give_their_spread_and_worst_status(tmp_path):
    """Three repeats of a concurrent cell: the uncertainty is the spread of their
    medians (not the tokens'), the status the worst of them."""
    means = [10.0, 14.0, 12.0]
    rows = [request(i, [m - 0.01, m + 0.01], repeat=k, ttft_ms=10.0 + k,
                    cell_status="crash" if k == 2 else "ok")
            for k, m in enumerate(means) for i in range(2)]
    summary = cell_summary.summarize([write_cell(tmp_path, "a", "short", 2, rows)], CONTEXTS)
    row = summary.iloc[0]
    assert row["repeats"] == 3
    assert row["status"] == "crash"
    assert row["uncertainty_from"] == "repeats"
    # The standard error of a median: 1.2533 sd / sqrt(n).
    assert row["decode_ms_se"] == pytest.approx(1.2533 * np.std(means, ddof=1) / np.sqrt(3))
    prefill = [128 / (10.0 + k) * 1000 for k in range(3)]
    assert row["prefill_tps_se"] == pytest.approx(
        1.2533 * np.std(prefill, ddof=1) / np.sqrt(3))


def test_a_single_stream_cell_s_sequential_requests_give_its_spread(tmp_path):
    """A concurrency-1 cell's requests (one after another) are separate passes through
    the servers: their spread is the uncertainty of decode, prefill and TTFT."""
    means, ttfts = [10.0, 14.0, 12.0, 11.0, 13.0], [10.0, 12.0, 11.0, 10.5, 11.5]
    rows = [request(i, [m - 0.01, m + 0.01], ttft_ms=t)
            for i, (m, t) in enumerate(zip(means, ttfts, strict=True))]
    row = cell_summary.summarize([write_cell(tmp_path, "a", "short", 1, rows)], CONTEXTS).iloc[0]
    assert row["uncertainty_from"] == "requests" and row["samples"] == 5
    assert row["decode_ms_per_token"] == pytest.approx(12.0)
    assert row["decode_ms_se"] == pytest.approx(1.2533 * np.std(means, ddof=1) / np.sqrt(5))
    assert row["ttft_ms_se"] == pytest.approx(1.2533 * np.std(ttfts, ddof=1) / np.sqrt(5))
    assert row["prefill_tps_se"] > 0


def test_repeats_from_file_names(tmp_path):
    paths = [write_cell(tmp_path, "a", "short", 1, [request(0, [m, m])], suffix=f"_r{k}")
             for k, m in enumerate([10.0, 11.0])]
    summary = cell_summary.summarize(paths, CONTEXTS)
    assert len(summary) == 1 and summary.iloc[0]["repeats"] == 2


def test_overlap_for_complete_cells_only(tmp_path):
    """A cell classed crash because decode was slow still has a real wall time (the seed
    reports -0.2 there); one whose request was cut short does not."""
    single = write_cell(tmp_path, "a", "short", 1, [request(0, [10.0] * 9)])  # 100 ms
    slow = write_cell(tmp_path, "a", "short", 2, [
        request(i, [10.0] * 9, cell_status="crash", wall_ms=150.0) for i in range(2)])
    cut = write_cell(tmp_path, "a", "long", 1, [request(0, [10.0] * 9)])
    cut2 = write_cell(tmp_path, "a", "long", 2, [
        request(0, [10.0] * 9, cell_status="overflow", wall_ms=150.0),
        request(1, [10.0] * 3, status="overflow", cell_status="overflow", n_predict=10,
                wall_ms=150.0)])
    summary = cell_summary.summarize([single, slow, cut, cut2], CONTEXTS).set_index(["ctx", "conc"])
    assert summary.loc[("short", 2), "overlap"] == pytest.approx(0.5)
    assert np.isnan(summary.loc[("long", 2), "overlap"])


# ---------------------------------------------------------------- summary-level tables


def test_difference_inside_uncertainty_is_not_resolvable():
    summary = frame(cell("baseline", "short", decode_ms=10.0, se=0.1),
                    cell("x", "short", decode_ms=10.2, se=0.1, prefill=1100.0),
                    cell("baseline", "long", decode_ms=20.0, se=0.1),
                    cell("x", "long", decode_ms=21.0, se=0.1, prefill=900.0))
    table = tables.link_comparison(summary, compared(summary), ORDER)
    # 2 x hypot(0.1, 0.1) = 0.28: 0.2 lies inside it, 1.0 does not; but without the
    # machine's drift over time (no anchors), 0.28 is only a lower bound.
    assert comparison_row(table, "x", "short")["decode Δ (ms/token)"] == \
        "not resolvable (+0.20 ±0.28)"
    assert comparison_row(table, "x", "long")["decode Δ (ms/token)"] == \
        "+1.00 ±0.28 (± a lower bound)"
    assert comparison_row(table, "x", "long")["compared"] == "sequential (no drift measured)"
    # No repeats: prefill has no measured uncertainty, so it is never called unresolvable.
    assert comparison_row(table, "x", "short")["prefill Δ"] == "+10%"
    assert comparison_row(table, "x", "long")["prefill Δ"] == "-10%"


def test_unknown_uncertainty_shows_the_difference_plain():
    summary = frame(cell("baseline", "short", se=None), cell("x", "short", decode_ms=10.05,
                                                              se=None))
    assert comparison_row(tables.link_comparison(summary, compared(summary), ORDER), "x", "short")[
        "decode Δ (ms/token)"] == "+0.05"


def test_comparison_with_repeats_uses_prefill_spread():
    summary = frame(cell("baseline", "short", prefill_tps_se=10.0),
                    cell("x", "short", prefill=1010.0, prefill_tps_se=10.0))
    comp = comparison.compare_links(summary)
    assert comp.loc[0, "prefill_change_pct"] == pytest.approx(1.0)
    assert bool(comp.loc[0, "prefill_resolvable"]) is False


def test_failures_and_missing_cells_in_the_comparison():
    summary = frame(cell("baseline", "short"), cell("x", "short", status="crash"),
                    cell("baseline", "long", status="overflow"), cell("x", "long"),
                    cell("y", "short"))
    table = tables.link_comparison(summary, compared(summary, baseline="baseline"), ORDER)
    assert comparison_row(table, "x", "short")["decode Δ (ms/token)"] == "✗ crash"
    assert comparison_row(table, "x", "long")["prefill Δ"] == "baseline ✗ 500"
    summary = frame(cell("x", "long"), cell("y", "long"))
    table = tables.link_comparison(summary, compared(summary, baseline="x"), ORDER)
    assert table.iloc[0]["decode Δ (ms/token)"] == "not resolvable (+0.00 ±0.28)"
    alone = frame(cell("y", "long"))
    assert tables.link_comparison(alone, compared(alone, baseline="x"), ORDER).iloc[0][
        "decode Δ (ms/token)"] == "— (no baseline cell)"


def test_baseline_defaults():
    assert cell_summary.pick_baseline(frame(cell("z", "short"), cell("baseline", "short"))) == \
        "baseline"
    assert cell_summary.pick_baseline(frame(cell("z", "short"), cell("a", "short"))) == "a"
    assert cell_summary.pick_baseline(frame(cell("z", "short")), "z") == "z"


def test_single_stream_tables_render_failures():
    summary = frame(cell("a", "short", decode_ms=10.0), cell("a", "long", status="ctx_wall"),
                    cell("b", "short", decode_ms=5.0), cell("b", "long", decode_ms=20.0))
    decode = tables.single_stream_decode(summary, ORDER).set_index("link")
    assert decode.loc["a", "long"] == "✗ 400" and decode.loc["a", "long/short"] == "—"
    assert decode.loc["b", "short"] == "200.0" and decode.loc["b", "long/short"] == "25%"
    prefill = tables.single_stream_prefill(summary, ORDER).set_index("link")
    assert prefill.loc["a", "short"] == "1000"
    ttft = tables.ttft_table(summary, ORDER)
    assert list(ttft["ctx"]) == ["short", "long", "short", "long"]
    assert ttft.iloc[1]["TTFT (ms)"] == "✗ 400"


def test_concurrency_boundary_over_any_levels():
    summary = frame(
        cell("a", "short", 1), cell("a", "short", 3), cell("a", "short", 8, status="overflow"),
        cell("a", "long", 1), cell("a", "long", 3, status="ctx_wall"),
        cell("b", "short", 1), cell("b", "short", 3),  # level 8 not measured
        cell("b", "long", 1, status="crash"))
    table = tables.concurrency_boundary(summary, ORDER).set_index("link")
    assert table.loc["a", "short"] == "3 (500 at 8)"
    assert table.loc["a", "long"] == "1 (400 at 3)"
    assert table.loc["b", "short"] == "3"
    assert table.loc["b", "long"] == "✗ crash"


def test_overlap_columns_follow_the_levels():
    summary = frame(cell("a", "short", 1), cell("a", "short", 3, overlap=0.74),
                    cell("a", "short", 6, status="crash", overlap=-0.04),
                    cell("a", "long", 1), cell("a", "long", 3, status="timeout"))
    table = tables.overlap_table(summary, ORDER).set_index("link")
    assert table.loc["a", "short"] == "0.7 / 0.0 ✗ crash"
    assert table.loc["a", "long"] == "✗ timeout / —"
    assert tables.overlap_levels(summary) == "3-way / 6-way"
    assert tables.overlap_table(frame(cell("a", "short")), ORDER).empty


# ---------------------------------------------------------------- single link, whole run


def test_a_single_link_matrix_gives_every_table():
    summary = frame(cell("only", "short"), cell("only", "short", 2, overlap=0.9),
                    cell("only", "long", status="ctx_wall"),
                    cell("only", "long", 2, status="ctx_wall"))
    every = table_files.tables(summary,
                               compared(summary), pd.DataFrame(columns=["pair", "link"]), ORDER)
    assert every["link_comparison"][1].empty
    assert every["concurrency_boundary"][1].iloc[0]["long"] == "✗ 400"
    assert "nothing to fit" in every["mechanisms"][1].iloc[0]["verdict"]
    for _, table in every.values():
        tables_io.to_markdown(table)


def test_aggregate_writes_every_table(tmp_path):
    requests, link_files = stages.two_links(tmp_path)
    out = tmp_path / "out"
    stages.aggregate(requests, link_files, CONTEXTS, str(out / "summary.parquet"),
                     str(out / "tables"), baseline_link="fast")
    # Exactly the tables the aggregate rule declares as its outputs, each as .md and .csv.
    written = sorted(p.name for p in (out / "tables").iterdir())
    assert written == sorted(f"{stem}.{ext}" for stem in contents.TABLE_STEMS
                             for ext in ("md", "csv"))
    for stem in contents.TABLE_STEMS:
        assert (out / "tables" / f"{stem}.md").read_text().startswith("## ")
    # One pair: the pairs table says so in one line, never empty and silent.
    assert "| one pair in this run (lab): no other pair to compare it with |" in (
        out / "tables" / "pairs.md").read_text()
    comparison = pd.read_csv(out / "tables" / "link_comparison.csv")
    assert set(comparison["baseline"]) == {"fast"}
    assert comparison.iloc[0]["decode Δ (ms/token)"].startswith("+1.00")
    mechanisms = pd.read_csv(out / "tables" / "mechanisms.csv")
    assert mechanisms.iloc[0]["slope"] == pytest.approx(2.0)  # 1 ms over 0.5 ms of latency

    # Again, with one cell re-measured: the summaries kept beside it serve every other
    # cell (infra/memo.py), and what is written is what a first build writes.
    written_first = {name: pd.read_parquet(out / name) for name in (
        "summary.parquet", "percentiles.parquet", "tail_shift.parquet",
        "service_levels.parquet")}
    assert sorted(p.name for p in (out / ".memo").iterdir()) == [
        "cells.parquet", "done.json", "percentiles.parquet", "service_levels.parquet",
        "tail_shift.parquet"]
    write_cell(tmp_path, "slow", "short", 1,
               [request(0, [3.0] * 8, send_ns=0, prompt=CONTEXTS["short"])])
    stages.aggregate(requests, link_files, CONTEXTS, str(out / "summary.parquet"),
                        str(out / "tables"), baseline_link="fast")
    again = pd.read_parquet(out / "summary.parquet").set_index(["link", "ctx", "conc"])
    assert again.loc[("slow", "short", 1), "decode_ms_per_token"] == pytest.approx(3.0)
    fresh = tmp_path / "fresh"
    stages.aggregate(requests, link_files, CONTEXTS, str(fresh / "summary.parquet"),
                        str(fresh / "tables"), baseline_link="fast")
    for name in written_first:
        pd.testing.assert_frame_equal(pd.read_parquet(out / name),
                                      pd.read_parquet(fresh / name), check_dtype=False)
    # ...and what the cells' own summary gives, read once each.
    direct = tmp_path / "direct.parquet"
    # (with the run-to-run columns the aggregate adds: none calibrated here)
    between_runs.apply(cell_summary.summarize(requests, CONTEXTS), {}).to_parquet(direct)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "summary.parquet"),
                                  pd.read_parquet(direct), check_dtype=False)


def test_the_machine_s_drift_widens_a_sequential_comparison():
    """Cells measured minutes apart differ by the machine's own drift too: with a 7.1%
    standard deviation per cell over time, a 1.0 ms difference on 10 ms cells is inside
    1.96 x sqrt(0.1^2 + 0.1^2 + 0.071^2 (10^2 + 11^2)) = 2.08 ms (no sample sizes known:
    the normal quantile)."""
    summary = frame(cell("baseline", "short", decode_ms=10.0, se=0.1,
                         uncertainty_from="requests"),
                    cell("x", "short", decode_ms=11.0, se=0.1, uncertainty_from="requests"))
    drift = pd.DataFrame({"pair": ["lab"], "model": ["m"], "drift_decode_rel": [0.1 / 2**0.5],
                          "drift_prefill_rel": [0.0]})
    comp = comparison.compare_links(summary, "baseline", drift).iloc[0]
    assert comp["decode_delta_unc_ms"] == pytest.approx(
        intervals.t_factor(np.inf) * np.sqrt(0.02 + 0.005 * (100 + 121)), rel=1e-6)
    # Ten requests a cell: the cells' terms bring their 9 degrees of freedom (Welch).
    counted = frame(cell("baseline", "short", decode_ms=10.0, se=0.1,
                         uncertainty_from="requests"),
                    cell("x", "short", decode_ms=11.0, se=0.1, uncertainty_from="requests")
                    ).assign(samples=10)
    wide = comparison.compare_links(counted, "baseline", drift).iloc[0]
    variance = 0.02 + 0.005 * (100 + 121)
    dof = variance ** 2 / (2 * 0.1 ** 4 / 9)  # the drift's own dof unbounded
    assert wide["decode_delta_unc_ms"] == pytest.approx(
        intervals.t_factor(dof) * np.sqrt(variance), rel=1e-6)
    assert wide["decode_delta_unc_ms"] > comp["decode_delta_unc_ms"]
    assert bool(comp["decode_resolvable"]) is False and not comp["decode_lower_bound"]
    steady = drift.assign(drift_decode_rel=0.001)
    table = tables.link_comparison(summary,
                                   compared(summary, baseline="baseline", drift=steady), ORDER)
    assert comparison_row(table, "x", "short")["decode Δ (ms/token)"] == "+1.00 ±0.28"
    assert comparison_row(table, "x", "short")["compared"] == \
        "sequential (machine drift included)"


def test_a_calibrated_run_to_run_term_of_the_difference_replaces_the_drift():
    """A pair with a calibration carries the difference's own run-to-run term (measured
    on A/A runs, a fraction of the baseline's decode) in place of the anchors' drift
    counted once per cell: here 2% of 10 ms at 5 degrees of freedom beside the cells'
    0.1 ms at 9 each."""
    counted = frame(cell("baseline", "short", decode_ms=10.0, se=0.1,
                         uncertainty_from="requests"),
                    cell("x", "short", decode_ms=11.0, se=0.1, uncertainty_from="requests")
                    ).assign(samples=10)
    calibration = {"lab": {"runs": 6, "cell_dof": 5, "dof": 5, "cells": {},
                           "figures": {"sequential_decode": {"single": 0.02},
                                       "sequential_prefill": {"single": 0.03}}}}
    summary = between_runs.apply(counted, calibration)
    drift = pd.DataFrame({"pair": ["lab"], "model": ["m"], "drift_decode_rel": [0.07],
                          "drift_prefill_rel": [0.07]})
    comp = comparison.compare_links(summary, "baseline", drift).iloc[0]
    variance = 2 * 0.1 ** 2 + 0.2 ** 2
    dof = variance ** 2 / (2 * 0.1 ** 4 / 9 + 0.2 ** 4 / 5)
    assert comp["decode_delta_unc_ms"] == pytest.approx(
        intervals.t_factor(dof) * np.sqrt(variance), rel=1e-6)
    assert comp["compared"] == "sequential (run-to-run variation included)"
    assert not comp["decode_lower_bound"] and not comp["prefill_lower_bound"]
    # The same cells without a calibration keep the drift (0.07 of each cell): wider.
    drifted = comparison.compare_links(between_runs.apply(counted, {}), "baseline",
                                       drift).iloc[0]
    assert drifted["decode_delta_unc_ms"] > 2 * comp["decode_delta_unc_ms"]
    assert drifted["compared"] == "sequential (machine drift included)"


def test_a_link_faster_than_the_baseline_is_flagged():
    summary = frame(cell("baseline", "short", decode_ms=10.0, uncertainty_from="requests"),
                    cell("x", "short", decode_ms=9.0, uncertainty_from="requests"))
    steady = pd.DataFrame({"pair": ["lab"], "model": ["m"], "drift_decode_rel": [0.001],
                           "drift_prefill_rel": [0.001]})
    comp = compared(summary, baseline="baseline", drift=steady)
    text = comparison_row(tables.link_comparison(summary, comp, ORDER), "x",
                          "short")["decode Δ (ms/token)"]
    assert text.startswith("-1.00 ±0.28 ⚠ faster than the baseline")


def test_flagged_cells_and_impossible_overlap_are_marked():
    summary = frame(cell("a", "short", flags="host A: CPU pressure 38% (limit 25%)"),
                    cell("a", "short", 2, overlap=1.4), cell("a", "short", 4, overlap=0.98),
                    cell("a", "long"))
    decode = tables.single_stream_decode(summary, ORDER).iloc[0]
    assert decode["short"].endswith(" ⚠") and not decode["long"].endswith("⚠")
    overlap = tables.overlap_table(summary, ORDER).iloc[0]
    assert overlap["short"] == "1.4 ⚠ / 1.0"


def test_the_machine_s_drift_comes_from_every_repeat_of_the_anchors_cell(tmp_path):
    """The anchors, the baseline's own cell and the baseline measured alongside each
    paired cell are the same cell at six times: their relative spread is the drift."""
    files = []
    for which, ms in (("start", 0.99), ("end", 0.93)):
        path = tmp_path / "anchors" / "lab" / "m" / f"{which}.requests.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist([request(0, [ms] * 4)]), path)
        files.append(str(path))
    summary = frame(cell("baseline", "short", decode_ms=0.69, ctx_tokens=128),
                    *[cell(link, "short", decode_ms=1.0, ctx_tokens=128,
                           paired_reference_decode_ms=ref, paired_reference_prefill_tps=1e3)
                      for link, ref in (("x", 0.69), ("y", 0.64), ("z", 0.85))],
                    cell("x", "long", decode_ms=5.0, ctx_tokens=4096,
                         paired_reference_decode_ms=9.0))
    drift = comparison.machine_drift(files, summary, "baseline").iloc[0]
    values = np.array([0.99, 0.93, 0.69, 0.69, 0.64, 0.85])
    assert drift["drift_samples"] == 6
    assert drift["drift_decode_rel"] == pytest.approx(values.std(ddof=1) / values.mean())


def test_a_link_measured_beside_other_work_is_flagged_in_the_links_table():
    links = pd.DataFrame({"pair": ["lab", "lab"], "link": ["quiet", "busy"],
                          "flags": [None, "throughput below half"],
                          "foreign_cpu_a_cores": [0.01, 1.2], "foreign_cpu_b_cores": [0.0, 0.0],
                          "cpu_pressure_a_pct": [5.0, 60.0]})
    flags = tables.links_table(links).set_index("link")["flags"]
    assert pd.isna(flags["quiet"])
    assert flags["busy"].startswith("throughput below half; ⚠ host A: CPU pressure 60%")
    assert "other processes used 1.20 cores" in flags["busy"]


def test_sockperf_stands_beside_the_probe_where_it_timed_a_link():
    """sockperf's 16 KB p50 beside the probe's, a dash where a link lacks it; no column
    where no link has it (the lab's default leaves sockperf out)."""
    links = pd.DataFrame({"pair": ["lab", "lab"], "link": ["a", "b"],
                          "rr16k_p50_us": [598.4, 126.0],
                          "sockperf16k_p50_us": [611.6, None]})
    table = tables.links_table(links).set_index("link")
    column = "16 KB RR p50, sockperf (µs)"
    assert table.loc["a", column] == 612.0 and pd.isna(table.loc["b", column])
    assert list(table.columns).index(column) == list(table.columns).index(
        "16 KB RR p50 (µs)") + 1
    assert column not in tables.links_table(links.drop(columns="sockperf16k_p50_us"))
    assert column not in tables.links_table(links.assign(sockperf16k_p50_us=None))


def test_a_cell_without_interference_figures_is_not_checked_and_says_so(tmp_path):
    quiet = write_cell(tmp_path, "a", "short", 1, [request(0, [1.0] * 8)])
    old = request(0, [1.0] * 8)
    for column in ("foreign_cpu_a_cores", "foreign_cpu_b_cores", "cpu_pressure_a_pct",
                   "cpu_pressure_b_pct"):
        del old[column]
    unknown = write_cell(tmp_path, "b", "short", 1, [old])
    busy = write_cell(tmp_path, "c", "short", 1, [request(0, [1.0] * 8,
                                                          foreign_cpu_a_cores=1.3)])
    summary = cell_summary.summarize([quiet, unknown, busy], CONTEXTS).set_index("link")
    assert summary.loc["a", "interference_checked"] and pd.isna(summary.loc["a", "flags"])
    assert not summary.loc["b", "interference_checked"]
    assert summary.loc["b", "flags"].startswith("interference not measured on host A")
    assert "other processes used 1.30 cores" in summary.loc["c", "interference"]
    note = table_files.flag_note(summary.reset_index())
    assert "lab/b/m/short/1: interference not measured" in note


def test_drift_reads_a_summary_without_paired_cells_back_from_parquet(tmp_path):
    """A run with no paired cell: its summary's paired columns are all None, and read
    back from Parquet they are objects, not floats (the backends example's findings step
    failed on np.isfinite(None))."""
    rows = [cell("base", "short", decode_ms=10.0), cell("slow", "short", decode_ms=12.0)]
    summary = frame(*rows).assign(ctx_tokens=128, paired_reference_decode_ms=None,
                                  paired_reference_prefill_tps=None)
    summary.to_parquet(tmp_path / "cells.parquet")
    back = pd.read_parquet(tmp_path / "cells.parquet")
    assert back["paired_reference_decode_ms"].dtype == object
    drift = comparison.machine_drift([], back, "base")
    assert drift.iloc[0]["drift_samples"] == 1 and np.isnan(drift.iloc[0]["drift_decode_rel"])


def test_without_any_measured_round_trips_the_prediction_uses_the_floor_and_says_so():
    """Nothing counted the round trips (no sweep, no packet socket on A): the latency
    term is the floor of one per worker, named as assumed, instead of no verdict."""
    summary = frame(cell("baseline", "short", decode_ms=1.0, se=0.01,
                         uncertainty_from="requests"),
                    cell("x", "short", decode_ms=1.5, se=0.01, uncertainty_from="requests"))
    links = pd.DataFrame({"pair": ["lab"] * 2, "link": ["baseline", "x"],
                          "rr64_p50_us": [50.0, 500.0]})
    nothing = comparison.round_trips([])
    comp = comparison.compare_links(summary, "baseline")
    guess = comparison.predicted_decode_delta(comp, links, nothing, {"m": 2}).iloc[0]
    assert guess["round_trips"] == 2
    assert guess["round_trips_from"].startswith("assumed: the floor of one per RPC worker")
    assert guess["predicted_latency_ms"] == pytest.approx(2 * 0.45)
    row = pd.concat([comp, comparison.predicted_decode_delta(comp, links, nothing,
                                                             {"m": 2})], axis=1).iloc[0]
    from splitbench.findings import costs as cost_findings

    assert "2.00 round trips per token (assumed: the floor" in cost_findings._why(row)
