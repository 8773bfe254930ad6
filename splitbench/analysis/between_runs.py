"""A cell's figure in another run: the machine's run-to-run variation beside the run's
own spread.

A cell's ± from its own requests (or releases) knows only how they varied within this
run. The machine's pace also moves between runs (measured on the 2-core development
machine: a single-stream decode figure moved across six runs of the same config by 3.4
times its own standard error), so a figure read as "what this cell costs" needs that
term too. It is measured by the project itself: A/A runs of one config
(`benchmarks/coverage.py --calibrate`), each figure's spread across the runs less its
within-run part, kept as a relative standard deviation per figure and kind of cell in
`config/between_runs.yaml` (the embedded lab's), and given to the pairs it was measured
on (plan.between_runs).

Each figure then carries three columns: `*_unc` (the ± shown: 95%, this run's spread and
the run-to-run term combined, at their Welch-Satterthwaite degrees of freedom),
`*_unc_run` (this run's precision alone) and `*_between_se` (the term); `unc_scope` says
which the ± is. A pair with no calibration keeps this run's ± and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from splitbench.infra import intervals

# figure: (its value column, its standard error column, relative (or absolute) term)
FIGURES = {
    "decode_ms": ("decode_ms_per_token", "decode_ms_se", "relative"),
    "prefill_tps": ("prefill_tps", "prefill_tps_se", "relative"),
    "ttft_ms": ("ttft_ms", "ttft_ms_se", "relative"),
    "throughput_tps": ("throughput_tps", "throughput_tps_se", "relative"),
    # An overlap lies between 0 and 1: its term is absolute.
    "overlap": ("overlap", "overlap_se", "absolute"),
}
KINDS = ("single", "concurrent")
# The prediction's own error (comparison.predicted_decode_delta), on every row of a pair:
# the sweep slope's run-to-run relative standard deviation and the model's error (ms/token)
PREDICTION = {"slope_rel_sd": "calibration_slope_rel_sd",
              "model_error_ms": "calibration_model_error_ms"}
THIS_RUN = "this run's spread only (no run-to-run calibration for this pair)"
ACROSS_RUNS = "this run's spread and the run-to-run variation of {runs} A/A runs ({when})"


def kind_of(conc: Any) -> str:
    """The kind of cell a calibration term is kept for."""
    return "single" if conc == 1 else "concurrent"


def apply(summary: pd.DataFrame, calibration: Mapping[str, Mapping[str, Any]]
          ) -> pd.DataFrame:
    """The summary with each figure's ± across runs (module docstring); `calibration`:
    per pair, the calibration file's contents (`runs`, `measured`, `dof`, `figures`:
    {figure: {kind: term}}), or nothing for a pair without one."""
    out = summary.copy()
    for figure in FIGURES:
        if f"{figure}_unc" in out:
            out[f"{figure}_unc_run"] = out[f"{figure}_unc"]
            out[f"{figure}_between_se"] = np.nan
    out["unc_scope"] = THIS_RUN
    for column in PREDICTION.values():
        out[column] = np.nan
    for pair, found in (calibration or {}).items():
        rows = out["pair"] == pair
        if not found or not rows.any():
            continue
        for figure, (value, se, scale) in FIGURES.items():
            if f"{figure}_unc" not in out:
                continue
            term = _term(out.loc[rows], found, figure, value, scale)
            dof = _dof(out.loc[rows], figure)
            total, total_dof = intervals.combined(
                [out.loc[rows, se].to_numpy(float), term],
                [dof, np.full(len(term), float(found.get("dof", intervals.UNBOUNDED)))])
            own = out.loc[rows, f"{figure}_unc_run"].to_numpy(float)
            out.loc[rows, f"{figure}_between_se"] = term
            # No term for this figure and kind: the run's own ± stands (and says so
            # through unc_scope's figure list); no ± of its own: none.
            out.loc[rows, f"{figure}_unc"] = np.where(
                np.isfinite(own) & np.isfinite(term), intervals.halfwidth(total, total_dof),
                own)
        for key, column in PREDICTION.items():
            out.loc[rows, column] = found.get("prediction", {}).get(key, np.nan)
        out.loc[rows, "unc_scope"] = ACROSS_RUNS.format(runs=found.get("runs", "?"),
                                                        when=found.get("measured", "?"))
    return out


def with_unc(cells: pd.DataFrame) -> pd.DataFrame:
    """`cells` with each figure's `*_unc` where it lacks the column (a summary written
    before the summary carried them, rows made by hand): this run's ± from its standard
    error at its own sample size."""
    out = cells.copy()
    for figure, (_, se, _) in FIGURES.items():
        if f"{figure}_unc" not in out and se in out:
            out[f"{figure}_unc"] = intervals.halfwidth(
                pd.to_numeric(out[se], errors="coerce").to_numpy(float), _dof(out, figure))
    return out


def _term(rows: pd.DataFrame, found: Mapping[str, Any], figure: str, value: str,
          scale: str) -> np.ndarray:
    """Each row's run-to-run standard error of `figure` (NaN where not calibrated)."""
    terms = found.get("figures", {}).get(figure, {})
    per_row = np.array([terms.get(kind_of(c), np.nan) for c in rows["conc"]], dtype=float)
    if scale == "absolute":
        return per_row
    return per_row * np.abs(pd.to_numeric(rows[value], errors="coerce").to_numpy(float))


def _dof(rows: pd.DataFrame, figure: str) -> np.ndarray:
    """The degrees of freedom of the run's own term: its samples (requests of a single
    stream, releases of a concurrent cell) less one."""
    column = "releases" if figure in ("throughput_tps", "overlap") else "samples"
    n = pd.to_numeric(rows.get(column, pd.Series(np.nan, index=rows.index)),
                      errors="coerce").to_numpy(float)
    return np.where(n >= 2, n - 1, intervals.UNBOUNDED)
