"""Thermal drift: which measured cells are suspect, and a new epoch for each of them.

A matrix runs for hours or days, so ambient and machine temperatures move under it (the
seed's author named day/night drift as the main confound). Three checks, each on the
summary's one row per cell (`cell_summary.summarize`), flag a cell whose status is ok:

band    `drift.reference_c: [low, high]` set: the cell started or ended outside the band,
        or its peak went above `high + peak_margin_c` (a peak is a one-second maximum,
        and brief spikes under load are normal, hence the margin).
rise    it warmed by more than `max_temp_rise_c` between its start and its end.
anchor  the (pair, model) block's anchor (a short single-stream cell on the baseline link,
        measured before and after the block) changed its decode ms/token by more than
        `anchor_tolerance`, or by more than the anchors' own uncertainty (a 95%
        interval) where that is wider. Which of the block's cells it flags:
        - temperatures known and the anchors' temperatures moved (their start and end
          spans lie more than `anchor_margin_c` apart): the drift is thermal, and the cells
          measured outside the anchors' temperature range (widened by anchor_margin_c)
          are flagged: the anchors bracket the others;
        - the anchors' temperatures did not move: the cause is not thermal (load, clocks),
          temperature cannot localise it, so every cell of the block is flagged, and the
          reason says that no other work was on the CPUs during the anchors (which
          would have failed the check): nothing measured explains the drift;
        - no anchor temperatures ("none found" sensors): every cell of the block is
          flagged; a cell without temperatures in a block whose anchors have them is
          flagged too (nothing shows it was inside the range).

interference  the cell ran while other work used the CPUs above the `interference:`
        limits, or its tokens share timestamps (the summary's `flags`, cell_summary.summarize).

A cell whose status is not ok is never a suspect: its failure mode (context wall,
overflow, collapse) is a result of its configuration, and temperatures alone do not make
it worth re-measuring. Missing columns (older results) and null temperatures skip the
checks that need them. An anchor check that cannot run is a failed check, never a
clean one: a (pair, model) block whose anchors are missing, have no ok request, give no
usable decode figure or ran under interference is reported as FAILED with the reason,
and its cells as not checked for drift (`blocks` and `unchecked` in the results).

`reruns.apply` records a new epoch for each suspect cell in `config/reruns.yaml`; the workflow
puts a cell's epoch in its params, so the next run re-measures exactly those cells.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from splitbench import configuration
from splitbench.contracts import results
from splitbench.contracts.slices import DriftSettings, InterferenceLimits
from splitbench.health import anchor_check, reruns
from splitbench.infra import parquet_io, tables_io
from splitbench.matrix.plan import cell_key
from splitbench.summary import cell_summary

KEYS = cell_summary.SUMMARY_KEYS  # a cell's identity
FIGURES = ["status", "decode_ms_per_token", "temp_before_c", "temp_after_c", "temp_peak_c",
           "temp_rise_c", "band_low_c", "band_high_c", "anchor_start_ms", "anchor_end_ms",
           "anchor_change", "anchor_threshold", "anchor_temp_low_c", "anchor_temp_high_c"]
COLUMNS = [*KEYS, "kind", "reason", *FIGURES]
KINDS = ("band", "rise", "anchor", "interference")


# ---------------------------------------------------------------- settings and keys


# ---------------------------------------------------------------- finding suspects


def find_suspects(summary: pd.DataFrame,
                  anchors: Mapping[tuple[str, str], Mapping[str, pd.DataFrame | None]],
                  config_settings: DriftSettings,
                  interference_limits: InterferenceLimits | None = None) -> pd.DataFrame:
    """One row per suspect cell: its keys, kind(s), a reason with figures, the figures.

    `anchors` maps (pair, model) to {"start": requests, "end": requests}, either None
    when not measured. `config_settings` is `configuration.drift_settings(config)`;
    `interference_limits` the `interference:` slice (anchors measured above it fail the
    anchor check). A cell flagged by several checks gets one row: kinds joined by ","
    and reasons by "; ". attrs: "checks" (what was checked, for the report), "blocks"
    (each (pair, model) anchor check: steady, drifted or failed, and why) and
    "unchecked" (the ok cells of blocks whose anchor check failed).
    """
    cfg = configuration.drift_settings({"drift": dict(config_settings)})
    cells = _eligible(summary)
    blocks, failed = _anchor_blocks(anchors, cfg, interference_limits or {},
                                    _block_names(summary, anchors))
    cells = cells.merge(blocks, on=["pair", "model"], how="left")
    found = [_band(cells, cfg), _rise(cells, cfg), _anchor(cells, cfg), _interfered(cells)]
    kinds = pd.concat([f["kind"] for f in found], axis=1)
    reasons = pd.concat([f["reason"] for f in found], axis=1)
    flagged = kinds.notna().any(axis=1)
    cells["kind"] = _join(kinds, ",")
    cells["reason"] = _join(reasons, "; ")
    out = cells.loc[flagged].reindex(columns=COLUMNS).reset_index(drop=True)
    out = out.astype({"kind": object, "reason": object, "status": object})
    out.attrs["checks"] = _checks_text(cfg, blocks, failed, cells)
    out.attrs["blocks"] = _block_outcomes(blocks, failed)
    out.attrs["unchecked"] = _unchecked(cells, failed)
    return out


def _block_names(summary: pd.DataFrame,
                 anchors: Mapping[tuple[str, str], Any]) -> list[tuple[str, str]]:
    """Every (pair, model) with cells or anchors: each needs its anchor check."""
    names = set(anchors)
    if {"pair", "model"} <= set(summary.columns):
        names |= set(zip(summary["pair"], summary["model"], strict=True))
    return sorted(names)


def _interfered(cells: pd.DataFrame) -> pd.DataFrame:
    """Cells the summary flags as measured under interference (above the limits) or with
    tokens that share timestamps: measuring again on a quieter machine helps. (Cells
    without interference figures are reported as not checked, not as suspects.)"""
    parts = [cells[c] if c in cells else pd.Series(None, index=cells.index, dtype=object)
             for c in ("interference", "timing")]
    reason = pd.Series([cell_summary.joined(i, t) for i, t in zip(*parts, strict=True)],
                       index=cells.index, dtype=object)
    return _flags(cells, "interference", reason)


def _eligible(summary: pd.DataFrame) -> pd.DataFrame:
    """The ok cells with every column the checks read (null where results lack it)."""
    cells = summary.reindex(columns=list(dict.fromkeys([*summary.columns, *KEYS,
                                                        *FIGURES[:5], "interference",
                                                        "timing"])))
    if "status" not in summary:
        cells["status"] = "ok"  # a summary without statuses: nothing known to have failed
    cells = cells.loc[cells["status"].eq("ok")].copy()
    temps = ["decode_ms_per_token", "temp_before_c", "temp_after_c", "temp_peak_c"]
    cells[temps] = cells[temps].apply(pd.to_numeric, errors="coerce").astype("float64")
    # Results from before the peak was sampled: the hotter end is the best peak known.
    hot_end = cells[["temp_before_c", "temp_after_c"]].max(axis=1)
    cells["temp_peak_c"] = cells["temp_peak_c"].fillna(hot_end)
    cells["temp_rise_c"] = cells["temp_after_c"] - cells["temp_before_c"]
    cells["conc"] = cells["conc"].astype("int64")
    return cells.reset_index(drop=True)


def _flags(cells: pd.DataFrame, kind: str, reason: pd.Series) -> pd.DataFrame:
    """kind and reason per cell, both null where the cell is not flagged."""
    reason = reason.astype(object).where(reason.notna(), None)
    flag = pd.Series(np.where(reason.notna(), kind, None), index=cells.index, dtype=object)
    return pd.DataFrame({"kind": flag, "reason": reason})


def _join(parts: pd.DataFrame, sep: str) -> pd.Series:
    return parts.apply(lambda row: sep.join(str(v) for v in row if v is not None
                                            and not pd.isna(v)) or None, axis=1)


def _band(cells: pd.DataFrame, cfg: DriftSettings) -> pd.DataFrame:
    band = cfg["reference_c"]
    low, high = band if band is not None else (None, None)
    cells["band_low_c"] = np.nan if low is None else float(low)
    cells["band_high_c"] = np.nan if high is None else float(high)
    text = f"the reference band {_c(low)}-{_c(high)} C"
    ends = cells[["temp_before_c", "temp_after_c"]]
    cold, warm, peak = ends.min(axis=1), ends.max(axis=1), cells["temp_peak_c"]
    # NaN compares False: a cell without temperatures is never out of band.
    too_cold = cold < cells["band_low_c"]
    peak_hot = peak > cells["band_high_c"] + cfg["peak_margin_c"]
    ends_hot = warm > cells["band_high_c"]
    margin = f" (+{cfg['peak_margin_c']:g} C allowed for peaks)" if cfg["peak_margin_c"] else ""
    reason = pd.Series(None, index=cells.index, dtype=object)
    reason[ends_hot] = [f"ran at {v:.1f} C, above {text}" for v in warm[ends_hot]]
    reason[peak_hot] = [f"peak {v:.1f} C above {text}{margin}" for v in peak[peak_hot]]
    reason[too_cold] = [f"ran at {v:.1f} C, below {text}" for v in cold[too_cold]]
    return _flags(cells, "band", reason)


def _rise(cells: pd.DataFrame, cfg: DriftSettings) -> pd.DataFrame:
    limit = cfg["max_temp_rise_c"]
    reason = pd.Series(None, index=cells.index, dtype=object)
    if limit is not None:
        rose = cells["temp_rise_c"] > limit
        reason[rose] = [f"rose {v:.1f} C during the cell ({a:.1f} -> {b:.1f} C, limit "
                        f"{limit:g} C)" for v, a, b in zip(
                            cells.loc[rose, "temp_rise_c"], cells.loc[rose, "temp_before_c"],
                            cells.loc[rose, "temp_after_c"], strict=True)]
    return _flags(cells, "rise", reason)


def _anchor(cells: pd.DataFrame, cfg: DriftSettings) -> pd.DataFrame:
    margin = cfg["anchor_margin_c"]
    span_low = cells[["temp_before_c", "temp_after_c"]].min(axis=1)
    span_high = cells[["temp_before_c", "temp_after_c", "temp_peak_c"]].max(axis=1)
    drifted = cells["anchor_drifted"].eq(True)
    known = cells["anchor_temp_low_c"].notna()
    thermal = cells["anchor_thermal"].eq(True)
    outside = (span_low < cells["anchor_temp_low_c"] - margin) | (
        span_high > cells["anchor_temp_high_c"] + margin)
    no_temps = span_high.isna()
    flag = drifted & (~known | ~thermal | outside | no_temps)
    where = pd.Series(None, index=cells.index, dtype=object)
    # Anchors measured under interference fail the check before this (anchor_check):
    # a drift here had no other work on the CPUs behind it, and the text says so.
    unexplained = ("no other work used the CPUs while the anchors ran, so nothing "
                   "measured here explains it (the machine's own pace: clocks, a virtual "
                   "machine's host)")
    where[drifted & ~known] = f"the anchors have no temperatures to localise it, and {unexplained}"
    where[drifted & known & ~thermal] = (
        f"the anchors' temperatures did not move, so temperature cannot localise it, and "
        f"{unexplained}")
    where[drifted & known & thermal & no_temps] = "the cell has no temperatures"
    out = drifted & known & thermal & outside
    where[out] = [f"cell at {a:.1f}-{b:.1f} C, outside the anchors' {lo:.1f}-{hi:.1f} C"
                  for a, b, lo, hi in zip(span_low[out], span_high[out],
                                          cells.loc[out, "anchor_temp_low_c"],
                                          cells.loc[out, "anchor_temp_high_c"], strict=True)]
    reason = pd.Series(None, index=cells.index, dtype=object)
    reason[flag] = cells.loc[flag, "anchor_text"] + "; " + where[flag]
    return _flags(cells, "anchor", reason)


# ---------------------------------------------------------------- anchors


def _anchor_blocks(anchors: Mapping[tuple[str, str], Mapping[str, pd.DataFrame | None]],
                   cfg: DriftSettings, limits: InterferenceLimits,
                   names: list[tuple[str, str]]) -> tuple[pd.DataFrame, dict[tuple[str, str], str]]:
    """One row per (pair, model) whose start and end anchors could be compared, and for
    every other block of `names`, why its anchor check failed."""
    columns = ["pair", "model", "anchor_start_ms", "anchor_end_ms", "anchor_change",
               "anchor_threshold", "anchor_drifted", "anchor_thermal", "anchor_temp_low_c",
               "anchor_temp_high_c", "anchor_text"]
    rows, failed = [], {}
    for pair, model in names:
        if cfg["anchor_tolerance"] is None:
            continue  # switched off in the config: said so in the checks, not a failure
        ends = anchors.get((pair, model)) or {}
        figures = {which: anchor_check.figures(ends.get(which), limits)
                   for which in ("start", "end")}
        problems = [f"the {which} anchor {figures[which]}" for which in ("start", "end")
                    if isinstance(figures[which], str)]
        if problems:
            failed[(pair, model)] = "; ".join(problems)
            continue
        rows.append({"pair": pair, "model": model,
                     **anchor_check.compare(figures["start"], figures["end"], cfg,
                                            f"{pair}/{model}")})
    blocks = pd.DataFrame(rows, columns=columns)
    # Typed even when empty: a left merge of untyped columns compares objects to floats.
    numbers = [c for c in columns[2:] if c.startswith("anchor_") and c != "anchor_text"
               and c not in ("anchor_drifted", "anchor_thermal")]
    blocks = blocks.astype({c: "float64" for c in numbers}).astype(
        {"anchor_drifted": object, "anchor_thermal": object, "anchor_text": object})
    return blocks, failed


def _checks_text(cfg: DriftSettings, blocks: pd.DataFrame,
                 failed: Mapping[tuple[str, str], str], cells: pd.DataFrame) -> list[str]:
    """What was checked, for the report (an empty table must say what it vouches for)."""
    band = cfg["reference_c"]
    lines = [f"reference band: {_c(band[0])}-{_c(band[1])} C, peaks +{cfg['peak_margin_c']:g} C"
             if band is not None else "reference band: not configured (drift.reference_c)",
             f"rise within a cell: at most {cfg['max_temp_rise_c']:g} C"
             if cfg["max_temp_rise_c"] is not None else "rise within a cell: not checked"]
    if cfg["anchor_tolerance"] is None:
        lines.append("anchors: not checked (drift.anchor_tolerance is null)")
    for row in blocks.itertuples(index=False):
        verdict = "drifted" if row.anchor_drifted else "steady"
        lines.append(f"anchor {row.pair}/{row.model}: {row.anchor_start_ms:.2f} -> "
                     f"{row.anchor_end_ms:.2f} ms/token ({row.anchor_change:+.1%}, limit "
                     f"±{row.anchor_threshold:.1%}): {verdict}")
    for (pair, model), why in sorted(failed.items()):
        mine = cells[(cells["pair"] == pair) & (cells["model"] == model)]
        lines.append(f"anchor {pair}/{model}: FAILED, the check could not run: {why}; its "
                     f"{len(mine)} ok cell(s) are not checked for drift (re-measure the "
                     f"anchors: --forcerun {results.anchor(pair, model, 'start')} "
                     f"{results.anchor(pair, model, 'end')})")
    return lines


def _block_outcomes(blocks: pd.DataFrame,
                    failed: Mapping[tuple[str, str], str]) -> list[dict[str, str]]:
    out = [{"pair": r.pair, "model": r.model,
            "outcome": "drifted" if r.anchor_drifted else "steady", "why": r.anchor_text}
           for r in blocks.itertuples(index=False)]
    out += [{"pair": pair, "model": model, "outcome": "failed", "why": why}
            for (pair, model), why in sorted(failed.items())]
    return out


def _unchecked(cells: pd.DataFrame, failed: Mapping[tuple[str, str], str]) -> pd.DataFrame:
    """The ok cells of every block whose anchor check failed, each with the reason."""
    keys = pd.Series(list(zip(cells["pair"], cells["model"], strict=True)), index=cells.index)
    mine = cells.loc[keys.isin(list(failed)), KEYS].copy()
    mine["reason"] = [f"not checked for drift: the {p}/{m} anchor check failed"
                      for p, m in zip(mine["pair"], mine["model"], strict=True)]
    return mine.reset_index(drop=True)


def _c(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


# ---------------------------------------------------------------- report


def write_report(suspects: pd.DataFrame, out_parquet: str | Path, table_stem: str | Path,
                 provenance: Mapping[str, Any] | None = None) -> None:
    """results/drift/report.parquet (the suspects; the block outcomes and unchecked cells
    in its metadata) and a Markdown + CSV table naming each suspect, then what could
    not be checked."""
    frame = suspects.reindex(columns=COLUMNS)
    frame.attrs = {}  # written as metadata below, not as pandas attributes
    checks = suspects.attrs.get("checks", [])
    blocks = suspects.attrs.get("blocks", [])
    unchecked = suspects.attrs.get("unchecked", pd.DataFrame(columns=[*KEYS, "reason"]))
    parquet_io.write(frame, out_parquet, {
        "stage": "drift", "suspects": len(frame), "checks": checks, "blocks": blocks,
        "unchecked": [{**r, "conc": int(r["conc"])} for r in unchecked.to_dict("records")],
        **(provenance or {})})
    table = suspect_table(frame, unchecked)
    failed = [b for b in blocks if b["outcome"] == "failed"]
    title = ("Drift: suspect cells" if not failed else
             f"Drift: suspect cells — CHECK FAILED for {', '.join(_block(b) for b in failed)}")
    note = "\nChecked:\n\n" + "".join(f"- {c}\n" for c in checks) if checks else ""
    tables_io.write_table(table, table_stem, title, note)


def _block(outcome: Mapping[str, str]) -> str:
    return f"{outcome['pair']}/{outcome['model']}"


def suspect_table(suspects: pd.DataFrame,
                  unchecked: pd.DataFrame | None = None) -> pd.DataFrame:
    """The table a person reads: each suspect, then one row per block whose cells were
    not checked; a single 'no suspect cells' row when there is neither."""
    rows = []
    if len(suspects):
        keys = [cell_key(*k) for k in suspects[KEYS].itertuples(index=False)]
        temps = [None if pd.isna(b) and pd.isna(a) else f"{b:.1f}->{a:.1f}, peak {p:.1f}"
                 for b, a, p in suspects[["temp_before_c", "temp_after_c", "temp_peak_c"]]
                 .itertuples(index=False)]
        rows.append(pd.DataFrame({
            "cell": keys, "kind": suspects["kind"].to_numpy(),
            "reason": suspects["reason"].to_numpy(),
            "decode ms/token": suspects["decode_ms_per_token"].round(3).to_numpy(),
            "temps (C)": temps}))
    if unchecked is not None and len(unchecked):
        for (pair, model), group in unchecked.groupby(["pair", "model"]):
            rows.append(pd.DataFrame({
                "cell": [f"{pair}/*/{model}/* ({len(group)} cells)"], "kind": ["NOT CHECKED"],
                "reason": [group["reason"].iloc[0]], "decode ms/token": [np.nan],
                "temps (C)": [None]}))
    if not rows:
        return pd.DataFrame({"cell": ["(none)"], "kind": ["—"], "reason": ["no suspect cells"],
                             "decode ms/token": [np.nan], "temps (C)": [None]})
    return pd.concat(rows, ignore_index=True)


# ---------------------------------------------------------------- the whole step


def read_anchors(anchor_files: list[str]) -> dict[tuple[str, str], dict[str, pd.DataFrame]]:
    """The anchors' request rows, by (pair, model) and when (start, end)."""
    anchors: dict[tuple[str, str], dict[str, pd.DataFrame]] = {}
    for path in anchor_files:
        rows = results.with_identity(pq.read_table(path).to_pandas(), path,
                                     ["pair", "model", "when"])
        if rows.empty:
            continue
        first = rows.iloc[0]
        anchors.setdefault((first["pair"], first["model"]), {})[first["when"]] = rows
    return anchors


def main_drift(summary_path: str | Path, anchor_files: list[str],
               config_settings: DriftSettings | None, report_out: str | Path,
               table_stem: str | Path, apply: bool, reruns_path: str | Path,
               interference_limits: InterferenceLimits | None = None) -> pd.DataFrame:
    """The drift step: read the summary and anchors, find the suspects, write the report
    and, with apply, bump their epochs in reruns_path. `config_settings` is the config's
    `drift:` slice (or drift_settings()' result). Returns the suspects."""
    cfg = configuration.drift_settings({"drift": dict(config_settings or {})})
    summary = pq.read_table(summary_path).to_pandas()
    suspects = find_suspects(summary, read_anchors(anchor_files), cfg, interference_limits)
    write_report(suspects, report_out, table_stem,
                 {"settings": cfg, "interference": dict(interference_limits or {})})
    if apply:
        reruns.apply(suspects, reruns_path)
    return suspects


def outcome_lines(suspects: pd.DataFrame) -> list[str]:
    """What the drift step found, for the end of its output: every failed check first."""
    lines = [f"drift check FAILED for {_block(b)}: {b['why']}"
             for b in suspects.attrs.get("blocks", []) if b["outcome"] == "failed"]
    unchecked = suspects.attrs.get("unchecked")
    if unchecked is not None and len(unchecked):
        lines.append(f"{len(unchecked)} cell(s) not checked for drift")
    kinds = suspects["kind"].str.split(",").explode().value_counts() if len(suspects) else {}
    lines.append(f"{len(suspects)} suspect cell(s)" + (
        " (" + ", ".join(f"{k}: {n}" for k, n in dict(kinds).items()) + ")" if len(kinds)
        else ""))
    return lines
