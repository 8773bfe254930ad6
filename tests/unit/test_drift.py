"""Drift step on hand-made summaries and anchors: band, rise and anchor checks, the report,
and the re-run epochs it records."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from splitbench import configuration
from splitbench.health import drift
from splitbench.health import reruns as epochs
from splitbench.infra import parquet_io
from splitbench.matrix import plan

BAND = {"reference_c": [30, 85]}


def cell(ctx: str = "short", conc: int = 1, *, link: str = "baseline", model: str = "synth",
         status: str = "ok", before: float | None = 50.0, after: float | None = 52.0,
         peak: float | None = 53.0, decode: float = 1.0) -> dict:
    """One summary row as cell_summary.summarize writes it (the columns drift reads)."""
    return {"pair": "lab", "link": link, "model": model, "ctx": ctx, "conc": conc,
            "status": status, "decode_ms_per_token": decode, "prefill_tps": 1000.0,
            "temp_before_c": before, "temp_after_c": after, "temp_peak_c": peak,
            "decode_ms_se": 0.01}


def summary(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


def anchor(decode_ms: list[float], *, before: float | None = 50.0, after: float | None = 51.0,
           peak: float | None = 52.0, se: float = 0.005, status: str = "ok") -> pd.DataFrame:
    """An anchor's request rows: one per request, the cell's temperatures on each."""
    n = len(decode_ms)
    return pd.DataFrame({
        "request_id": range(n), "status": [status] * n, "cell_status": [status] * n,
        "t_send_ns": [1_700_000_000_000_000_000 + i for i in range(n)],
        "decode_ms_per_token": decode_ms, "decode_ms_se": [se] * n,
        "temp_before_c": [before] * n, "temp_after_c": [after] * n, "temp_peak_c": [peak] * n,
        "sensors_a": ["thermal_zone0; no NVML"] * n,
        # Measured on a quiet machine: the anchor check needs to know.
        "foreign_cpu_a_cores": [0.0] * n, "foreign_cpu_b_cores": [0.0] * n,
    })


def drifting(start_temps: tuple[float, float, float] = (50, 51, 52),
             end_temps: tuple[float, float, float] = (58, 59, 60),
             start_ms: float = 1.02, end_ms: float = 1.16) -> dict:
    """Anchors whose decode went from start_ms to end_ms (+14% by default)."""
    b0, a0, p0 = start_temps
    b1, a1, p1 = end_temps
    return {("lab", "synth"): {
        "start": anchor([start_ms] * 3, before=b0, after=a0, peak=p0),
        "end": anchor([end_ms] * 3, before=b1, after=a1, peak=p1)}}


def cells_of(found: pd.DataFrame) -> set[str]:
    return {plan.cell_key(*k) for k in found[drift.KEYS].itertuples(index=False)}


def find(frame: pd.DataFrame, anchors: dict | None = None, **cfg) -> pd.DataFrame:
    return drift.find_suspects(frame, anchors or {}, configuration.drift_settings({"drift": cfg}))


# ---------------------------------------------------------------- settings


def test_settings_defaults_and_checks():
    cfg = configuration.drift_settings({})
    assert cfg["reference_c"] is None
    assert cfg["max_temp_rise_c"] == 10.0
    assert cfg["anchor_tolerance"] == 0.10
    assert configuration.drift_settings({"drift": BAND})["reference_c"] == [30, 85]
    with pytest.raises(ValueError, match="low 90 >= high 85"):
        configuration.drift_settings({"drift": {"reference_c": [90, 85]}})
    with pytest.raises(ValueError, match="unknown setting"):
        configuration.drift_settings({"drift": {"reference": [30, 85]}})


def test_cell_key_is_the_cells_path_without_suffix():
    assert plan.cell_key("lab", "usb4", "synth", "32k", 4) == "lab/usb4/synth/ctx32k_c4"
    assert plan.cell_key("lab", "usb4", "synth", "5k", np.int64(2)) == "lab/usb4/synth/ctx5k_c2"


# ---------------------------------------------------------------- band and rise


def test_cell_above_band_flagged_with_figures_and_cell_within_band_not():
    found = find(summary(cell("short", before=60, after=70, peak=91.0),
                         cell("5k", before=60, after=70, peak=80.0)), **BAND)
    assert cells_of(found) == {"lab/baseline/synth/ctxshort_c1"}
    row = found.iloc[0]
    assert row["kind"] == "band"
    assert "peak 91.0 C above the reference band 30-85 C" in row["reason"]
    assert row["temp_peak_c"] == 91.0
    assert (row["band_low_c"], row["band_high_c"]) == (30.0, 85.0)


def test_peak_margin_tolerates_a_brief_spike_but_not_a_hot_end():
    rows = summary(cell("short", before=75, after=80, peak=88.0),   # spike within margin
                   cell("5k", before=80, after=87.0, peak=88.0))    # ended above the band
    found = find(rows, **BAND, peak_margin_c=5)
    assert cells_of(found) == {"lab/baseline/synth/ctx5k_c1"}
    assert "ran at 87.0 C, above the reference band 30-85 C" in found.iloc[0]["reason"]
    strict = find(rows, **BAND, peak_margin_c=0)
    assert len(strict) == 2


def test_cell_below_band_flagged():
    found = find(summary(cell(before=22.5, after=40, peak=41)), **BAND)
    assert "ran at 22.5 C, below the reference band 30-85 C" in found.iloc[0]["reason"]


def test_no_band_configured_checks_no_band():
    assert find(summary(cell(before=60, after=70, peak=99.0))).empty


def test_rise_within_a_cell():
    found = find(summary(cell("short", before=40, after=52.5, peak=53),
                         cell("5k", before=40, after=49, peak=50)))
    assert cells_of(found) == {"lab/baseline/synth/ctxshort_c1"}
    assert found.iloc[0]["kind"] == "rise"
    assert "rose 12.5 C during the cell (40.0 -> 52.5 C, limit 10 C)" in found.iloc[0]["reason"]
    assert found.iloc[0]["temp_rise_c"] == pytest.approx(12.5)
    assert find(summary(cell(before=40, after=52.5)), max_temp_rise_c=None).empty


def test_failed_cell_is_not_a_suspect_by_temperature():
    found = find(summary(cell("short", status="crash", before=40, after=95, peak=99),
                         cell("5k", status="ctx_wall", before=20, after=20, peak=20)),
                 **BAND)
    assert found.empty


def test_several_reasons_make_one_row():
    found = find(summary(cell(before=60, after=75, peak=95)), **BAND)
    assert len(found) == 1
    assert found.iloc[0]["kind"] == "band,rise"
    assert "peak 95.0 C" in found.iloc[0]["reason"] and "rose 15.0 C" in found.iloc[0]["reason"]


def test_old_results_without_temperature_columns():
    old = summary(cell()).drop(columns=["temp_before_c", "temp_after_c", "temp_peak_c",
                                        "decode_ms_se"])
    assert find(old, **BAND).empty
    # Null temperatures ("none found" sensors) compare as unknown, never as out of band.
    assert find(summary(cell(before=None, after=None, peak=None)), **BAND).empty


def test_peak_falls_back_to_hotter_end_when_not_sampled():
    old = summary(cell(before=70, after=90, peak=None)).drop(columns=["temp_peak_c"])
    found = find(old, **BAND)
    assert found.iloc[0]["temp_peak_c"] == 90.0


# ---------------------------------------------------------------- anchors


BLOCK = summary(
    cell("short", 1, before=51, after=55, peak=56),               # inside 50-60 (+-2)
    cell("5k", 1, before=58, after=61, peak=61.5),                # inside with the margin
    cell("32k", 1, before=60, after=64, peak=66),                 # hotter than the anchors
    cell("short", 2, before=44, after=46, peak=47),               # cooler than the anchors
    cell("32k", 4, status="crash", before=60, after=70, peak=75),  # failed: never
    cell("short", 1, model="other", before=80, after=80, peak=80),  # another block
)


def test_thermal_anchor_drift_flags_the_block_cells_outside_the_anchors_range():
    found = find(BLOCK, drifting())
    assert cells_of(found) == {"lab/baseline/synth/ctx32k_c1", "lab/baseline/synth/ctxshort_c2"}
    assert set(found["kind"]) == {"anchor"}
    hot = found.set_index("ctx").loc["32k"]
    assert "anchor decode drifted +14% (1.02 -> 1.16 ms/token" in hot["reason"]
    assert "lab/synth block" in hot["reason"]
    assert "cell at 60.0-66.0 C, outside the anchors' 50.0-60.0 C" in hot["reason"]
    assert hot["anchor_change"] == pytest.approx(1.16 / 1.02 - 1)
    assert (hot["anchor_temp_low_c"], hot["anchor_temp_high_c"]) == (50.0, 60.0)


def test_steady_anchor_flags_nothing():
    assert find(BLOCK, drifting(end_ms=1.05)).empty     # +3% < 10%
    # A 14% change is drift at a 10% tolerance, not at 20%.
    assert find(BLOCK, drifting(), anchor_tolerance=0.20).empty
    assert find(BLOCK, drifting(), anchor_tolerance=None).empty


def test_anchor_tolerance_is_never_tighter_than_the_anchors_uncertainty():
    noisy = {("lab", "synth"): {"start": anchor([0.80, 1.02, 1.24]),
                                "end": anchor([0.94, 1.16, 1.38])}}
    # Medians 1.02 -> 1.16 (+14%), but each anchor's standard error (of a median of 3) is
    # 1.2533 * 0.22 / sqrt(3) = 0.159 ms: the limit becomes the 95% interval of their
    # difference, t at 4 degrees of freedom (2.78) x hypot(0.159, 0.159) / 1.02 = 61.3%.
    found = find(BLOCK, noisy)
    assert found.empty
    checks = found.attrs["checks"]
    assert any("lab/synth" in c and "limit ±61.3%" in c and "steady" in c for c in checks)


def test_anchors_without_temperatures_flag_every_ok_cell_of_the_block():
    anchors = {("lab", "synth"): {"start": anchor([1.02] * 3, before=None, after=None,
                                                  peak=None),
                                  "end": anchor([1.16] * 3, before=None, after=None,
                                                peak=None)}}
    found = find(BLOCK, anchors)
    assert cells_of(found) == {"lab/baseline/synth/ctxshort_c1", "lab/baseline/synth/ctx5k_c1",
                               "lab/baseline/synth/ctx32k_c1", "lab/baseline/synth/ctxshort_c2"}
    assert all("no temperatures to localise it" in r for r in found["reason"])
    # Its anchors ran with nothing else on the CPUs (or the check would have failed):
    # the flag says no cause was measured, rather than leaving one to be guessed.
    assert all("nothing measured here explains it" in r for r in found["reason"])


def test_anchors_at_the_same_temperature_flag_the_whole_block():
    found = find(BLOCK, drifting(end_temps=(50, 51.5, 52.5)))
    assert len(found) == 4
    assert all("did not move" in r for r in found["reason"])


def test_cell_without_temperatures_in_a_thermal_block_is_flagged():
    found = find(summary(cell(before=None, after=None, peak=None)), drifting())
    assert "the cell has no temperatures" in found.iloc[0]["reason"]


SYNTH_OK_CELLS = {"lab/baseline/synth/ctxshort_c1", "lab/baseline/synth/ctx5k_c1",
                  "lab/baseline/synth/ctx32k_c1", "lab/baseline/synth/ctxshort_c2"}


@pytest.mark.parametrize(("end", "why"), [
    (None, "the end anchor was not measured"),
    (anchor([5.0] * 3, status="timeout"), "the end anchor has no ok request (timeout)"),
    # Every token on one stamp: a decode of 0 ms/token is no reference.
    (anchor([0.0] * 3), "the end anchor gives no usable decode figure (0.000 ms/token"),
    (anchor([1.1] * 3).assign(cpu_pressure_a_pct=58.0),
     "the end anchor ran under interference (host A: CPU pressure 58% (limit 50%)"),
    # No interference figures: nothing shows the anchor measured only itself.
    (anchor([1.1] * 3).drop(columns=["foreign_cpu_a_cores", "foreign_cpu_b_cores"]),
     "the end anchor cannot show it measured only itself (interference not measured on "
     "host A"),
])
def test_an_anchor_check_that_cannot_run_fails_and_leaves_its_cells_unchecked(end, why):
    found = find(BLOCK, {("lab", "synth"): {"start": anchor([1.02] * 3), "end": end}})
    assert found.empty  # nothing compared, so nothing flagged...
    failed = {(b["pair"], b["model"]): b for b in found.attrs["blocks"]
              if b["outcome"] == "failed"}
    assert why in failed[("lab", "synth")]["why"]  # ...but the check says it failed
    assert any(c.startswith("anchor lab/synth: FAILED") and why in c
               for c in found.attrs["checks"])
    unchecked = found.attrs["unchecked"]
    assert cells_of(unchecked[unchecked["model"] == "synth"]) == SYNTH_OK_CELLS
    assert any(c.startswith("drift check FAILED for lab/synth") for c in
               drift.outcome_lines(found))


def test_a_block_without_anchors_is_not_checked_and_anchors_switched_off_are_said_so():
    found = find(BLOCK, drifting())
    blocks = {b["model"]: b["outcome"] for b in found.attrs["blocks"]}
    assert blocks == {"synth": "drifted", "other": "failed"}
    assert cells_of(found.attrs["unchecked"]) == {"lab/baseline/other/ctxshort_c1"}
    off = find(BLOCK, {}, anchor_tolerance=None)
    assert off.attrs["blocks"] == [] and off.attrs["unchecked"].empty
    assert "anchors: not checked (drift.anchor_tolerance is null)" in off.attrs["checks"]


def test_cells_measured_under_interference_are_suspects():
    flagged = summary(cell("short"), cell("5k")).assign(
        interference=["host A: CPU pressure 58% (limit 50%) during the cell", None])
    found = find(flagged, {("lab", "synth"): {"start": anchor([1.0] * 3),
                                              "end": anchor([1.0] * 3)}})
    assert cells_of(found) == {"lab/baseline/synth/ctxshort_c1"}
    assert found.iloc[0]["kind"] == "interference"
    assert "CPU pressure 58%" in found.iloc[0]["reason"]


def test_no_ok_cells_gives_an_empty_frame_with_the_columns():
    found = find(summary(cell(status="crash")), drifting(), **BAND)
    assert found.empty
    assert list(found.columns) == drift.COLUMNS


# ---------------------------------------------------------------- report


def test_report_names_each_suspect_and_why(tmp_path):
    found = find(BLOCK, drifting(), **BAND)
    out, stem = tmp_path / "drift" / "report.parquet", tmp_path / "tables" / "drift"
    drift.write_report(found, out, stem)
    back = pq.read_table(out).to_pandas()
    assert cells_of(back) == cells_of(found) and len(back) == 2
    assert parquet_io.provenance(out)["stage"] == "drift"
    md = stem.with_suffix(".md").read_text()
    assert "lab/baseline/synth/ctx32k_c1" in md and "outside the anchors'" in md
    assert "anchor lab/synth: 1.02 -> 1.16 ms/token" in md
    # The block without anchors is a failed check, in the title and in its own row.
    assert md.startswith("## Drift: suspect cells — CHECK FAILED for lab/other")
    csv = pd.read_csv(stem.with_suffix(".csv"))
    assert set(csv["cell"]) == cells_of(found) | {"lab/*/other/* (1 cells)"}
    assert csv.set_index("cell").loc["lab/*/other/* (1 cells)", "kind"] == "NOT CHECKED"
    meta = parquet_io.provenance(out)
    assert {(b["model"], b["outcome"]) for b in meta["blocks"]} == {("synth", "drifted"),
                                                                   ("other", "failed")}
    assert [u["model"] for u in meta["unchecked"]] == ["other"]


def test_report_without_suspects_says_so(tmp_path):
    steady = {("lab", "synth"): {"start": anchor([1.0] * 3), "end": anchor([1.01] * 3)}}
    found = find(summary(cell()), steady, **BAND)
    out, stem = tmp_path / "report.parquet", tmp_path / "drift"
    drift.write_report(found, out, stem)
    back = pq.read_table(out).to_pandas()
    assert back.empty and list(back.columns) == drift.COLUMNS
    assert "no suspect cells" in stem.with_suffix(".md").read_text()
    assert "reference band: 30-85 C" in stem.with_suffix(".md").read_text()
    assert pd.read_csv(stem.with_suffix(".csv"))["reason"].tolist() == ["no suspect cells"]


# ---------------------------------------------------------------- epochs


def test_epochs_of_a_missing_file_is_empty(tmp_path):
    assert plan.epochs(tmp_path / "reruns.yaml") == {}
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    assert plan.epochs(tmp_path / "empty.yaml") == {}


def test_apply_bumps_exactly_the_flagged_cells_and_keeps_others(tmp_path):
    reruns = tmp_path / "config" / "reruns.yaml"
    reruns.parent.mkdir()
    reruns.write_text("cells:\n  lab/usb4/synth/ctx5k_c2: 3\n")
    found = find(BLOCK, drifting())
    assert epochs.apply(found, reruns) == {"lab/baseline/synth/ctx32k_c1": 1,
                                          "lab/baseline/synth/ctxshort_c2": 1}
    assert plan.epochs(reruns) == {"lab/usb4/synth/ctx5k_c2": 3,
                                    "lab/baseline/synth/ctx32k_c1": 1,
                                    "lab/baseline/synth/ctxshort_c2": 1}
    epochs.apply(found, reruns)
    again = plan.epochs(reruns)
    assert again["lab/baseline/synth/ctx32k_c1"] == 2
    assert again["lab/usb4/synth/ctx5k_c2"] == 3
    # plan.py's reading: a plain mapping, absent cells at epoch 0.
    data = yaml.safe_load(reruns.read_text())
    assert data["cells"].get("lab/baseline/synth/ctxshort_c1", 0) == 0
    assert [h["epoch"] for h in data["history"]["lab/baseline/synth/ctx32k_c1"]] == [1, 2]
    text = reruns.read_text()
    assert text.startswith("# Re-run epochs")
    assert "lab/baseline/synth/ctx32k_c1: 2  # 20" in text and "outside the anchors'" in text


def test_apply_bumps_a_cell_once_per_call_whatever_its_rows(tmp_path):
    found = find(summary(cell(before=60, after=75, peak=95)), **BAND)
    doubled = pd.concat([found, found], ignore_index=True)
    reruns = tmp_path / "reruns.yaml"
    now = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert epochs._bump(doubled, reruns, now) == {"lab/baseline/synth/ctxshort_c1": 1}
    assert "2025-01-02T03:04:05Z" in reruns.read_text()


def test_apply_without_suspects_leaves_the_file_alone(tmp_path):
    reruns = tmp_path / "reruns.yaml"
    assert epochs.apply(find(summary(cell())), reruns) == {}
    assert not reruns.exists()


# ---------------------------------------------------------------- the whole step


def test_main_drift_reads_writes_and_applies(tmp_path):
    summary_path = tmp_path / "results" / "summary" / "cells.parquet"
    parquet_io.write(BLOCK, summary_path, {})
    files = []
    for which, frame in drifting()[("lab", "synth")].items():
        path = tmp_path / "results" / "anchors" / "lab" / "synth" / f"{which}.requests.parquet"
        parquet_io.write(frame, path, {})
        files.append(str(path))
    out = tmp_path / "results" / "drift" / "report.parquet"
    stem = tmp_path / "results" / "tables" / "drift_suspects"
    reruns = tmp_path / "config" / "reruns.yaml"
    found = drift.main_drift(summary_path, files, {}, out, stem, False, reruns)
    assert len(found) == 2 and out.exists() and stem.with_suffix(".md").exists()
    assert not reruns.exists()
    drift.main_drift(summary_path, files, {}, out, stem, True, reruns)
    assert set(plan.epochs(reruns)) == cells_of(found)
    assert parquet_io.provenance(out)["settings"]["anchor_tolerance"] == 0.10


def test_read_anchors_rejects_other_files(tmp_path):
    """A file whose rows do not say which anchor they are, and whose name is no anchor's,
    is refused by name."""
    path = tmp_path / "anchors" / "lab" / "synth" / "middle.requests.parquet"
    path.parent.mkdir(parents=True)
    pd.DataFrame({"request_id": [0], "status": ["ok"]}).to_parquet(path)
    with pytest.raises(ValueError, match="middle.requests.parquet: not a cell's file"):
        drift.read_anchors([str(path)])


def test_anchor_rows_that_carry_their_identity_need_no_path(tmp_path):
    path = tmp_path / "elsewhere.parquet"
    pd.DataFrame({"pair": ["lab"], "link": ["plain"], "model": ["synth"], "when": ["end"],
                  "request_id": [0], "status": ["ok"]}).to_parquet(path)
    anchors = drift.read_anchors([str(path)])
    assert list(anchors) == [("lab", "synth")] and list(anchors["lab", "synth"]) == ["end"]
