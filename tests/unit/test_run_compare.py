"""Two results directories side by side (`python -m splitbench compare`)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from splitbench import cli, results


def a_run(root: Path, usb4_decode: float, mtu: int = 1500, headline: str = "usb4 costs "
          "decode +0.50 ±0.05 ms/token at short", extra_cell: bool = False,
          with_se: bool = True, tail: str = "usb4 shifts every gap between tokens alike"
          ) -> Path:
    """A results directory with what compare reads: the summary, a toolchain, the links
    and the findings."""
    cells = [{"pair": "lab", "link": link, "model": "m", "ctx": "short", "conc": 1,
              "status": "ok", "decode_ms_per_token": decode, "prefill_tps": 900.0,
              "ttft_ms": 30.0,
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
    Path(results.under(root, results.FINDINGS)).write_text(
        f"## Findings\n\n### m\n\n- **{headline}**. More.\n- **{tail}**.\n")
    return root


def test_two_runs_one_changed_cable_and_one_cell_only_in_b(tmp_path, capsys):
    a = a_run(tmp_path / "a", 1.50)
    b = a_run(tmp_path / "b", 1.70, mtu=9000, extra_cell=True,
              headline="usb4 costs decode +0.70 ±0.05 ms/token at short",
              tail="usb4 adds jitter at short")
    assert cli.main(["compare", str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "2 cells in both runs; 1 of 6 figures with a ± changed beyond it (83% within" \
        in text
    # usb4's decode rose 0.2 ms against a ± of 2 x hypot(0.01, 0.01): beyond it.
    usb4 = next(line for line in text.splitlines() if line.startswith("| lab | usb4 |"))
    assert "⚠ +0.200 ±0.028" in usb4 and "+0.0 ±28.3" in usb4
    baseline = next(line for line in text.splitlines()
                    if line.startswith("| lab | baseline | m | short"))
    assert "⚠" not in baseline and "+0.000 ±0.028" in baseline
    assert "- link lab/usb4 mtu_a: 1500 → 9000" in text
    assert "| lab | baseline | m | 5k | 1 | B |" in text
    # The links' costs come before the cells: what a cable change moves, read first.
    assert text.index("## What each link costs") < text.index("## Cells in both")
    # The link's cost in each run: sequential cells with no drift measured, so the ±
    # is a lower bound and a change beyond it is not called.
    cost = next(line for line in text.splitlines() if line.startswith("| lab | m | usb4 |"))
    assert "| +0.50 ±0.03 | +0.70 ±0.03 | +0.20 ±0.04 (± a lower bound) |" in cost, cost
    # Paired in both runs: the ± is the rounds' own, and a change beyond it is marked.
    from splitbench.analysis import run_compare
    paired = pd.DataFrame([{"pair": "lab", "model": "m", "link": "usb4", "ctx": "short",
                            "compared": "paired (20 rounds)", "status": "ok",
                            "status_base": "ok", "decode_delta_ms": cost_ms,
                            "decode_delta_unc_ms": 0.05, "decode_lower_bound": False}
                           for cost_ms in (0.58, 1.01)])
    changed = run_compare.costs(paired.iloc[:1], paired.iloc[1:])
    assert run_compare.costs_table(changed)["change"].iloc[0] == "⚠ +0.43 ±0.07"
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
    assert "0 of 0 figures with a ± changed beyond it" in text
    assert "+0.000 (no ±)" in text
    assert "- nothing recorded differs (builds, link facts)" in text
    assert cli.main(["compare", str(a), str(tmp_path / "nothing")]) == 2
    assert "no summary/cells.parquet" in capsys.readouterr().err


def test_two_runs_carry_each_runs_drift_and_set_flagged_cells_apart():
    """Two runs are two times: a cell's change carries both runs' machine drift (from
    their anchors), not only each cell's own spread; a cell either run flagged is
    counted apart from the share within ±."""
    from splitbench.analysis import run_compare
    a = pd.DataFrame([{"pair": "lab", "link": link, "model": "m", "ctx": "short",
                       "conc": 1, "status": "ok", "decode_ms_per_token": 1.00,
                       "decode_ms_se": 0.01, "flags": None} for link in ("base", "usb4")])
    b = a.assign(decode_ms_per_token=1.05, flags=[None, "hosts A and B: other processes"])
    alone = run_compare.cells(a, b)
    assert list(alone["decode_ms_per_token_beyond"]) == [True, True]
    drift = pd.DataFrame([{"pair": "lab", "model": "m", "drift_decode_rel": 0.03,
                           "drift_prefill_rel": 0.05}])
    drifting = run_compare.cells(a, b, drift, drift)
    # 2 x hypot(hypot(0.01, 0.03 x 1.00), hypot(0.01, 0.03 x 1.05)) = 0.0915
    assert drifting["decode_ms_per_token_unc"].iloc[0] == pytest.approx(0.0915, abs=1e-4)
    assert list(drifting["decode_ms_per_token_beyond"]) == [False, False]
    assert list(drifting["flagged"]) == [False, True]
    line = run_compare.summary_line(drifting)
    assert line.startswith("2 cells in both runs; 1 cell flagged in either run, counted "
                           "apart; 0 of 1 figures with a ± changed beyond it (100% within")
    assert list(run_compare.cells_table(drifting)["status"]) == ["ok", "⚠ flagged"]
    # A run beside two CPU hogs flags every cell: nothing is counted, and it says so.
    busy = run_compare.cells(a, b.assign(flags="hosts A and B: other processes"))
    assert run_compare.summary_line(busy) == (
        "2 cells in both runs, every one flagged in one run or the other: none is "
        "counted (the table marks each).")
