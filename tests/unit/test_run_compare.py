"""Two results directories side by side (`python -m splitbench compare`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from splitbench import cli
from splitbench.compare import run_compare
from splitbench.contracts import findings_file, results
from splitbench.findings.text import Finding
from splitbench.infra import intervals
from splitbench.report import side_by_side


def a_run(root: Path, usb4_decode: float, mtu: int = 1500, headline: str = "usb4 costs "
          "decode +0.50 ±0.05 ms/token at short", extra_cell: bool = False,
          with_se: bool = True, tail: str = "usb4 shifts every gap between tokens alike",
          samples: int = 10) -> Path:
    """A results directory with what compare reads: the summary, a toolchain, the links
    and the findings."""
    cells = [{"pair": "lab", "link": link, "model": "m", "ctx": "short", "conc": 1,
              "status": "ok", "decode_ms_per_token": decode, "prefill_tps": 900.0,
              "ttft_ms": 30.0, "samples": samples, "uncertainty_from": "requests",
              **({"decode_ms_se": 0.01, "prefill_tps_se": 10.0, "ttft_ms_se": 0.5}
                 if with_se else {})}
             for link, decode in (("baseline", 1.00), ("usb4", usb4_decode))]
    if extra_cell:
        cells.append({**cells[0], "ctx": "5k"})
    summary = Path(results.under(root, results.SUMMARY))
    summary.parent.mkdir(parents=True)
    pd.DataFrame(cells).to_parquet(summary)
    toolchain = Path(results.under(root, results.TOOLCHAIN.format(pair="lab")))
    toolchain.parent.mkdir(parents=True)
    toolchain.write_text(json.dumps({"pair": "lab", "a": {"build_id": "4242"},
                                     "b": {"build_id": "4242"}}))
    link = Path(results.under(root, results.link("lab", "usb4")))
    link.parent.mkdir(parents=True)
    pd.DataFrame([{"pair": "lab", "link": "usb4", "mtu_a": mtu, "mtu_b": mtu,
                   "kernel_a": "6.1.0"}]).to_parquet(link)
    Path(results.under(root, results.FINDINGS_DATA)).write_text(findings_file.as_json(
        [Finding("m", headline, ". More.").record(), Finding("m", tail, ".").record()]))
    return root


def cells_of(decodes: dict[str, float], samples: int = 30, **extra) -> pd.DataFrame:
    """A summary of single-stream cells, one per link, each figure with its standard
    error from `samples` requests."""
    return pd.DataFrame([{"pair": "lab", "link": link, "model": "m", "ctx": "short",
                          "conc": 1, "status": "ok", "decode_ms_per_token": decode,
                          "decode_ms_se": 0.01, "prefill_tps": 900.0,
                          "prefill_tps_se": 10.0, "ttft_ms": 30.0, "ttft_ms_se": 0.5,
                          "samples": samples, "uncertainty_from": "requests", "flags": None,
                          **extra} for link, decode in decodes.items()])


def no_costs() -> pd.DataFrame:
    """costs() of two runs that compared no link with a baseline."""
    empty = pd.DataFrame(columns=run_compare.COST_COLUMNS)
    return run_compare.costs(empty, empty)


def test_two_runs_one_changed_cable_and_one_cell_only_in_b(tmp_path, capsys):
    a = a_run(tmp_path / "a", 1.50)
    b = a_run(tmp_path / "b", 1.70, mtu=9000, extra_cell=True,
              headline="usb4 costs decode +0.70 ±0.05 ms/token at short",
              tail="usb4 adds jitter at short")
    assert cli.main(["compare", str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    # Six figures (two cells x decode, prefill, TTFT): about 0.3 beyond their ± by
    # chance; the link's cost is sequential with no drift measured, so not tested.
    assert ("2 cells in both runs. 6 figures tested; 1 beyond their own 95% ± (chance "
            "alone gives about 0.3); 1 after Holm's correction (5% family-wise); 1 more "
            "change not tested") in text
    assert "The ± holds only each run's own spread" in text
    assert "how many samples" not in text
    # usb4's decode rose 0.2 ms against a ± of t(18 dof) x hypot(0.01, 0.01) = 0.030 (10
    # requests a side): beyond it by far, and still after Holm's correction.
    usb4 = next(line for line in text.splitlines() if line.startswith("| lab | usb4 |"))
    assert "⚠ +0.200 ±0.030 (p<0.001)" in usb4 and "| +0.0 ±29.7 (p=1) |" in usb4
    baseline = next(line for line in text.splitlines()
                    if line.startswith("| lab | baseline | m | short"))
    assert "⚠" not in baseline and "+0.000 ±0.030 (p=1)" in baseline
    assert "- link lab/usb4 mtu_a: 1500 → 9000" in text
    assert "| lab | baseline | m | 5k | 1 | B |" in text
    # The links' costs come before the cells: what a cable change moves, read first.
    assert text.index("## What each link costs") < text.index("## Cells in both")
    # The link's cost in each run: sequential cells with no drift measured, so the ±
    # is a lower bound and the change is not tested.
    cost = next(line for line in text.splitlines() if line.startswith("| lab | m | usb4 |"))
    assert "| +0.50 ±0.03 | +0.70 ±0.03 | +0.20 ±0.04 (± a lower bound) |" in cost, cost
    # Paired in both runs (20 rounds: 19 degrees of freedom a side, 38 for the change):
    # the ± is the rounds' own, and a change far beyond it survives Holm's correction.
    paired = pd.DataFrame([{"pair": "lab", "model": "m", "link": "usb4", "ctx": "short",
                            "compared": "paired (20 rounds)", "status": "ok",
                            "status_base": "ok", "decode_delta_ms": cost_ms,
                            "decode_delta_se": 0.025, "decode_delta_dof": 19,
                            "decode_lower_bound": False} for cost_ms in (0.58, 1.01)])
    changed = run_compare.costs(paired.iloc[:1], paired.iloc[1:])
    assert changed["dof"].iloc[0] == pytest.approx(38.0)
    quiet = run_compare.cells(cells_of({"base": 1.0}), cells_of({"base": 1.0}))
    _, changed, tally = run_compare.flag(quiet, changed)
    assert side_by_side.two_runs_costs_table(changed)["change"].iloc[0] == \
        "⚠ +0.43 ±0.07 (p<0.001)"
    assert (tally.tested, tally.beyond, tally.survived) == (4, 1, 1)
    # A headline whose figures moved is counted; one that says something else is listed.
    assert "1 headline reads the same but for their figures" in text
    assert "costs decode" not in text.split("## Findings that changed")[1]
    assert "- A only: m: usb4 shifts every gap between tokens alike" in text
    assert "- B only: m: usb4 adds jitter at short" in text
    page = (tmp_path / "out/compare.html").read_text()
    assert "<table>" in page and "Two runs compared" in page
    assert (tmp_path / "out/compare.md").read_text().strip() == text.strip()


def test_a_run_from_before_the_standard_errors_compares_without_a_plus_minus(tmp_path,
                                                                           capsys):
    a = a_run(tmp_path / "a", 1.50, with_se=False)
    b = a_run(tmp_path / "b", 1.50)
    assert cli.main(["compare", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert "no figure could be tested; 7 more changes not tested" in text
    assert "+0.000 (no ±)" in text and "(p=" not in text
    assert "- nothing recorded differs (builds, link facts)" in text
    assert cli.main(["compare", str(a), str(tmp_path / "nothing")]) == 2
    assert "no summary/cells.parquet" in capsys.readouterr().err


def test_a_run_from_before_findings_were_data_says_so_instead_of_listing_them(tmp_path,
                                                                                capsys):
    """A run whose findings were written as Markdown alone: its findings are not compared
    (never all of B's listed as new), and the page says how to write them."""
    a = a_run(tmp_path / "a", 1.50)
    b = a_run(tmp_path / "b", 1.50)
    Path(results.under(a, results.FINDINGS_DATA)).unlink()
    assert cli.main(["compare", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert "not compared: A has no findings.json" in text and "B only" not in text


def test_two_runs_carry_each_runs_drift_and_set_flagged_cells_apart():
    """Two runs are two times: a cell's change carries both runs' machine drift (from
    their anchors, at their degrees of freedom), not only each cell's own spread; a
    cell either run flagged is not tested."""
    a = pd.DataFrame([{"pair": "lab", "link": link, "model": "m", "ctx": "short",
                       "conc": 1, "status": "ok", "decode_ms_per_token": 1.00,
                       "decode_ms_se": 0.01, "flags": None} for link in ("base", "usb4")])
    b = a.assign(decode_ms_per_token=1.05, flags=[None, "hosts A and B: other processes"])
    alone = run_compare.cells(a, b)
    assert list(alone["decode_ms_per_token_beyond"]) == [True, True]
    drift = pd.DataFrame([{"pair": "lab", "model": "m", "drift_decode_rel": 0.03,
                           "drift_prefill_rel": 0.05, "drift_samples": 5}])
    drifting = run_compare.cells(a, b, drift, drift)
    # sqrt(0.01² + (0.03 x 1.00)² + 0.01² + (0.03 x 1.05)²) = 0.0457; the cells' own
    # samples unknown (unbounded), the drift's 5 anchors 4 each: 9.76 degrees of
    # freedom, t = 2.236, so ± 0.1023.
    assert drifting["decode_ms_per_token_se"].iloc[0] == pytest.approx(0.045741, abs=1e-6)
    assert drifting["decode_ms_per_token_dof"].iloc[0] == pytest.approx(9.757, abs=1e-3)
    assert drifting["decode_ms_per_token_unc"].iloc[0] == pytest.approx(0.1023, abs=1e-4)
    assert list(drifting["decode_ms_per_token_beyond"]) == [False, False]
    assert list(drifting["flagged"]) == [False, True]
    assert list(drifting["decode_ms_per_token_tested"]) == [True, False]
    assert run_compare.samples_note(a, b).startswith(
        "Neither summary says how many samples some cells' figures rest on")
    assert run_compare.samples_note(a.assign(samples=5), b).startswith(
        "B's summary does not say")
    assert run_compare.samples_note(a.assign(samples=5), b.assign(samples=5)) == ""
    drifting, _, tally = run_compare.flag(drifting, no_costs())
    assert side_by_side.two_runs_line(drifting) == (
        "2 cells in both runs; 1 cell flagged in either run, not tested.")
    assert tally.line() == (
        "1 figure tested; 0 beyond their own 95% ± (chance alone gives about 0.1); 0 after "
        "Holm's correction (5% family-wise); 1 more change not tested (a cell flagged in "
        "either run, or a ± only a lower bound or none)")
    assert list(side_by_side.two_runs_table(drifting)["status"]) == ["ok", "⚠ flagged"]
    # A run beside two CPU hogs flags every cell: nothing is tested, and it says so.
    busy = run_compare.cells(a, b.assign(flags="hosts A and B: other processes"))
    busy, _, tally = run_compare.flag(busy, no_costs())
    assert side_by_side.two_runs_line(busy) == (
        "2 cells in both runs, every one flagged in one run or the other: none is "
        "tested (the table marks each).")
    assert not busy["decode_ms_per_token_flag"].any()
    assert tally.line().startswith("no figure could be tested; 2 more changes not tested")


def test_holm_steps_down_from_the_smallest_p_value():
    """Holm at 5%: the smallest p against 0.05/m, the next against 0.05/(m-1), ...,
    stopping at the first that fails."""
    assert list(run_compare.holm([0.01, 0.02, 0.03, 0.5])) == [True, False, False, False]
    assert list(run_compare.holm([0.5, 0.03, 0.01, 0.02])) == [False, False, True, False]
    # Step-down rejects more than Bonferroni (0.0125 each) would: all four here.
    assert list(run_compare.holm([0.01, 0.012, 0.014, 0.04])) == [True] * 4
    # A NaN is no test: m is 2, and 0.02 passes 0.05/1 after 0.01 passed 0.05/2.
    assert list(run_compare.holm([0.01, np.nan, 0.02])) == [True, False, True]
    assert list(run_compare.holm([])) == []


def test_a_p_value_is_two_sided_at_the_changes_degrees_of_freedom():
    assert run_compare.p_value(0.03, 0.01, np.inf) == pytest.approx(0.0026998, abs=1e-6)
    assert run_compare.p_value(-0.03, 0.01, 4) == pytest.approx(0.039941, abs=1e-5)
    assert np.isnan(run_compare.p_value(0.03, np.nan, 4))


def test_a_figure_beyond_its_own_plus_minus_by_chance_is_not_flagged_but_a_real_change_is():
    """Twelve cells, 36 figures: one changed by 2.5 standard errors (p 0.015, beyond its
    own ±, which chance gives 1.8 of 36) is not marked after Holm's correction; one
    changed by 14 is."""
    links = {f"l{i}": 1.0 for i in range(12)}
    a = cells_of(links)
    b = cells_of({**links, "l3": 1.0 + 2.5 * np.hypot(0.01, 0.01), "l7": 1.2})
    compared, _, tally = run_compare.flag(run_compare.cells(a, b), no_costs())
    row = compared.set_index("link")
    assert row.loc["l3", "decode_ms_per_token_p"] == pytest.approx(0.0153, abs=1e-4)
    assert row.loc["l3", "decode_ms_per_token_beyond"] is True
    assert not row.loc["l3", "decode_ms_per_token_flag"]
    assert row.loc["l7", "decode_ms_per_token_flag"]
    assert int(compared[[f"{f}_flag" for f, *_ in run_compare.FIGURES]].sum().sum()) == 1
    assert tally.line() == ("36 figures tested; 2 beyond their own 95% ± (chance alone "
                            "gives about 1.8); 1 after Holm's correction (5% family-wise)")
    table = side_by_side.two_runs_table(compared).set_index("link")
    assert table.loc["l3", "decode (ms/token) change"] == "+0.035 ±0.028 (p=0.015)"
    assert table.loc["l7", "decode (ms/token) change"] == "⚠ +0.200 ±0.028 (p<0.001)"


def test_a_figure_from_few_samples_gets_a_wider_plus_minus():
    """The ± is Student's t at the change's degrees of freedom, not a fixed 2: from 3
    requests a side (4 dof) it is 2.78 standard errors, from 30 (58 dof) 2.00; from one
    request the per-token floor is a lower bound and not tested."""
    few = run_compare.cells(cells_of({"usb4": 1.0}, samples=3),
                            cells_of({"usb4": 1.05}, samples=3))
    many = run_compare.cells(cells_of({"usb4": 1.0}, samples=30),
                             cells_of({"usb4": 1.05}, samples=30))
    assert few["decode_ms_per_token_dof"].iloc[0] == pytest.approx(4.0)
    assert many["decode_ms_per_token_dof"].iloc[0] == pytest.approx(58.0)
    assert few["decode_ms_per_token_unc"].iloc[0] == pytest.approx(0.039264, abs=1e-6)
    assert many["decode_ms_per_token_unc"].iloc[0] == pytest.approx(0.028309, abs=1e-6)
    one = run_compare.cells(cells_of({"usb4": 1.0}, samples=1),
                            cells_of({"usb4": 1.05}, samples=30, ))
    assert one["decode_ms_per_token_lower_bound"].iloc[0]
    assert np.isnan(one["decode_ms_per_token_p"].iloc[0])
    assert one["decode_ms_per_token_beyond"].iloc[0] is None
    one, _, tally = run_compare.flag(one, no_costs())
    assert side_by_side.two_runs_table(one)["decode (ms/token) change"].iloc[0] == \
        "+0.050 ±0.028 (± a lower bound)"
    assert tally.tested == 0 and tally.untested == 3


def test_a_between_run_standard_error_widens_the_plus_minus_where_a_summary_has_one():
    """The machine varies between runs more than one run's spread sees: a summary's
    `*_between_se` joins the change's standard error (unbounded dof), and the page says
    whether the ± holds it."""
    a = cells_of({"usb4": 1.0}, samples=10, decode_ms_between_se=0.02)
    b = cells_of({"usb4": 1.05}, samples=10, decode_ms_between_se=0.02)
    wide = run_compare.cells(a, b)
    # sqrt(2 x 0.01² + 2 x 0.02²); the own terms' 9 dof each: (1e-3)² / (2e-8 / 9) = 450.
    assert wide["decode_ms_per_token_se"].iloc[0] == pytest.approx(0.031623, abs=1e-6)
    assert wide["decode_ms_per_token_dof"].iloc[0] == pytest.approx(450.0)
    assert wide["decode_ms_per_token_beyond"].iloc[0] is False
    narrow = run_compare.cells(a.drop(columns="decode_ms_between_se"),
                               b.drop(columns="decode_ms_between_se"))
    assert narrow["decode_ms_per_token_beyond"].iloc[0] is True
    # Prefill and TTFT carry none: their ± is unchanged.
    assert wide["prefill_tps_se"].iloc[0] == narrow["prefill_tps_se"].iloc[0]
    assert run_compare.between_note(a, b.drop(columns="decode_ms_between_se")) == (
        "The ± includes the machine's variation between runs where a summary carries it "
        "(`*_between_se`, at its calibration's degrees of freedom, in place of the run's "
        "drift, which it holds; A: decode (ms/token); B: none).")
    assert run_compare.between_note(a.drop(columns="decode_ms_between_se"),
                                    b.drop(columns="decode_ms_between_se")).startswith(
        "The ± holds only each run's own spread")


def test_a_calibrated_run_to_run_term_replaces_the_drift_and_brings_its_dof():
    """The A/A runs' term holds the drift within a run too: where a summary carries it,
    the run's anchors' drift is not counted again, and the term comes at its
    calibration's degrees of freedom (here 5) instead of unbounded."""
    drift = pd.DataFrame([{"pair": "lab", "model": "m", "drift_decode_rel": 0.03,
                           "drift_prefill_rel": 0.0, "drift_samples": 4}])
    a = cells_of({"usb4": 1.0}, samples=10, decode_ms_between_se=0.02, calibration_dof=5)
    b = cells_of({"usb4": 1.05}, samples=10, decode_ms_between_se=0.02, calibration_dof=5)
    both = run_compare.cells(a, b, drift, drift)
    se, dof = intervals.combined([0.01, 0.01, 0.02, 0.02], [9, 9, 5, 5])
    assert both["decode_ms_per_token_se"].iloc[0] == pytest.approx(se)
    assert both["decode_ms_per_token_dof"].iloc[0] == pytest.approx(dof)
    # Without the term the drift (3% of each run's figure) stands in for it.
    bare = run_compare.cells(a.drop(columns="decode_ms_between_se"),
                             b.drop(columns="decode_ms_between_se"), drift, drift)
    assert bare["decode_ms_per_token_se"].iloc[0] == pytest.approx(
        np.sqrt(2 * 0.01 ** 2 + 0.03 ** 2 + 0.0315 ** 2), rel=1e-6)
