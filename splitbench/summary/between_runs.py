"""A cell's figure in another run: the machine's run-to-run variation beside the run's
own spread.

A cell's ± from its own requests (or releases) knows only how they varied within this
run. The machine's pace also moves between runs (measured on the 2-core development
machine: a single-stream decode figure moved across six runs of the same config by 3.4
times its own standard error), so a figure read as "what this cell costs" needs that
term too. It is measured by the project itself: A/A runs of one config
(`benchmarks/coverage.py --calibrate`), each figure's spread across the runs less its
within-run part, kept in `config/between_runs.yaml` (the embedded lab's) per cell of the
matrix it measured and, pooled, per figure and kind of cell (at each context and over
all), and given to the kind of pair it was measured on (plan.between_runs). A cell it
measured takes its own term shrunk halfway to its kind's (`terms`: a term from five
runs can read half its size); another cell its kind's.

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
    # Absolute: the machine moves the hosts' compute, not a link's added delay.
    "decode_ms": ("decode_ms_per_token", "decode_ms_se", "absolute"),
    "prefill_tps": ("prefill_tps", "prefill_tps_se", "relative"),
    "ttft_ms": ("ttft_ms", "ttft_ms_se", "relative"),
    "throughput_tps": ("throughput_tps", "throughput_tps_se", "relative"),
    # An overlap lies between 0 and 1: its term is absolute.
    "overlap": ("overlap", "overlap_se", "absolute"),
    # A paired link cost: both sides share each round's moment, but not the run's (host
    # A's own state differs from run to run): an absolute term, in ms/token.
    "paired_decode": ("paired_decode_delta_ms", "paired_decode_delta_se", "absolute"),
}
# A link cost measured in a block apart from the baseline's (comparison._sequential):
# the run-to-run spread of the difference itself beyond its two cells' own standard
# errors, kept on the link's cell: each a fraction of the baseline cell's figure (decode
# ms/token, prefill tokens/s). (The two cells share much of a run's pace, so the difference varies
# less than the two cells' own terms together say.)
SEQUENTIAL = {"sequential_decode": "sequential_decode_between_se",
              "sequential_prefill": "sequential_prefill_between_se"}
SEQUENTIAL_DOF = "sequential_between_dof"
KINDS = ("single", "concurrent")
# The prediction's own error (comparison.predicted_decode_delta), on every row of a pair:
# the sweep slope's run-to-run relative standard deviation and the model's error (ms/token;
# the file may hold it per context too, "model_error_ms/<ctx>", which a row of that
# context takes)
PREDICTION = {"slope_rel_sd": "calibration_slope_rel_sd",
              "model_error_ms": "calibration_model_error_ms"}
# The calibration's degrees of freedom per cell (its runs less one), on every row of a
# calibrated pair: the prediction's terms are weighed by it.
CALIBRATION_DOF = "calibration_dof"
# How this run's machine compares with the calibration's runs: each cell's decode against
# the calibration runs' mean for that cell (`pace`), and the range the calibration's own
# runs spanned (each run's median over its cells): a run outside that range ran on a day
# the run-to-run terms did not see (health/checks.py says so).
PACE = ("calibration_pace", "calibration_pace_low", "calibration_pace_high")
THIS_RUN = "this run's spread only (no run-to-run calibration for this pair)"
ACROSS_RUNS = "this run's spread and the run-to-run variation of {runs} A/A runs ({when})"


def kind_of(conc: Any) -> str:
    """The kind of cell a calibration term is kept for."""
    return "single" if conc == 1 else "concurrent"


def cell_key(row: Any) -> str:
    """A cell's name in the calibration's `cells`: pair/link/model/ctx/conc."""
    return "/".join(str(row[k]) for k in ("pair", "link", "model", "ctx", "conc"))


def apply(summary: pd.DataFrame, calibration: Mapping[str, Mapping[str, Any]]
          ) -> pd.DataFrame:
    """The summary with each figure's ± across runs (module docstring); `calibration`:
    per pair, the calibration file's contents, or nothing for a pair without one:
    `cells` ({cell: {figure: term}}, a term per cell of the matrix it was measured on,
    at `cell_dof` degrees of freedom) and, for a cell it did not measure, `figures`
    ({figure: {kind: term}}, pooled over its cells, at `dof`)."""
    out = with_unc(summary)
    for figure in FIGURES:
        if f"{figure}_unc" in out:
            out[f"{figure}_unc_run"] = out[f"{figure}_unc"]
            out[f"{figure}_between_se"] = np.nan
    out["unc_scope"] = THIS_RUN
    for column in [*PREDICTION.values(), *SEQUENTIAL.values(), SEQUENTIAL_DOF,
                   CALIBRATION_DOF, *PACE]:
        out[column] = np.nan
    for pair, found in (calibration or {}).items():
        rows = out["pair"] == pair
        if not found or not rows.any():
            continue
        for figure, (value, se, scale) in FIGURES.items():
            if f"{figure}_unc" not in out:
                continue
            values = pd.to_numeric(out.loc[rows, value], errors="coerce").to_numpy(float)
            term, term_dof = terms(out.loc[rows], found, figure, values,
                                   scale == "absolute")
            total, total_dof = intervals.combined(
                [out.loc[rows, se].to_numpy(float), term], [_dof(out.loc[rows], figure),
                                                            term_dof])
            own = out.loc[rows, f"{figure}_unc_run"].to_numpy(float)
            out.loc[rows, f"{figure}_between_se"] = term
            # No term for this figure and cell: the run's own ± stands; no ± of its
            # own: none.
            out.loc[rows, f"{figure}_unc"] = np.where(
                np.isfinite(own) & np.isfinite(term), intervals.halfwidth(total, total_dof),
                own)
        for figure, column in SEQUENTIAL.items():
            term, term_dof = terms(out.loc[rows], found, figure,
                                   np.ones(int(rows.sum())), absolute=True)
            out.loc[rows, column] = term
            out.loc[rows, SEQUENTIAL_DOF] = term_dof
        prediction = found.get("prediction", {})
        for key, column in PREDICTION.items():
            # A context's own term where the calibration has one, else the pooled one.
            out.loc[rows, column] = [prediction.get(f"{key}/{ctx}", prediction.get(key, np.nan))
                                     for ctx in out.loc[rows, "ctx"].astype(str)]
        out.loc[rows, CALIBRATION_DOF] = float(found.get("cell_dof", np.nan))
        _pace(out, rows, found.get("pace") or {})
        out.loc[rows, "unc_scope"] = ACROSS_RUNS.format(runs=found.get("runs", "?"),
                                                        when=found.get("measured", "?"))
    return out


def apply_percentiles(dist: pd.DataFrame, calibration: Mapping[str, Mapping[str, Any]]
                      ) -> pd.DataFrame:
    """The percentiles table (summary.percentiles) with each p99's ± (`p99_unc`): its
    bootstrap's at the normal quantile, with the run-to-run term of the cell's p99 of
    that metric where its pair has one (`cells`' `<metric>_p99`, relative)."""
    out = dist.copy()
    se = pd.to_numeric(out.get("p99_se", pd.Series(np.nan, index=out.index)),
                       errors="coerce").to_numpy(float)
    out["p99_unc"] = intervals.halfwidth(se, intervals.UNBOUNDED)
    for pair, found in (calibration or {}).items():
        rows = (out["pair"] == pair).to_numpy() if "pair" in out else np.zeros(len(out), bool)
        if not found or not rows.any():
            continue
        cells = found.get("cells", {})
        part = out.loc[rows]
        rel = np.array([cells.get(cell_key(r), {}).get(f"{r['metric']}_p99", np.nan)
                        for _, r in part.iterrows()], dtype=float)
        term = rel * np.abs(pd.to_numeric(part["p99"], errors="coerce").to_numpy(float))
        total, dof = intervals.combined(
            [se[rows], term], [np.full(rows.sum(), intervals.UNBOUNDED),
                               np.full(rows.sum(), float(found.get("cell_dof", 1)))])
        out.loc[rows, "p99_unc"] = np.where(np.isfinite(term) & np.isfinite(se[rows]),
                                            intervals.halfwidth(total, dof),
                                            out.loc[rows, "p99_unc"])
    return out


def terms(rows: pd.DataFrame, found: Mapping[str, Any], figure: str, values: np.ndarray,
          absolute: bool) -> tuple[np.ndarray, np.ndarray]:
    """Each row's run-to-run standard error of `figure` and its degrees of freedom: the
    cell's own term where the calibration measured that cell, else its kind's pooled
    term (NaN where neither). A relative term is scaled by the row's value."""
    cells, pooled = found.get("cells", {}), found.get("figures", {}).get(figure, {})
    rel, dof = [], []
    for _, row in rows.iterrows():
        own = cells.get(cell_key(row), {}).get(figure)
        # Its kind's term at its context where measured there, else over every context.
        kind = pooled.get(f"{kind_of(row['conc'])}/{row['ctx']}",
                          pooled.get(kind_of(row["conc"])))
        if own is not None and kind is not None:
            # A cell's own term rests on a few runs: shrunk halfway to its kind's, whose
            # many cells hold it steadier (a term from five runs can read half its size).
            rel.append(float(np.sqrt((own ** 2 + kind ** 2) / 2)))
            dof.append(2.0 * float(found.get("cell_dof", 1)))
        elif own is not None:
            rel.append(own)
            dof.append(float(found.get("cell_dof", 1)))
        else:
            rel.append(np.nan if kind is None else kind)
            dof.append(float(found.get("dof", intervals.UNBOUNDED)))
    rel_array = np.asarray(rel, dtype=float)
    return (rel_array if absolute else rel_array * np.abs(values)), np.asarray(dof)


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


def _dof(rows: pd.DataFrame, figure: str) -> np.ndarray:
    """The degrees of freedom of the run's own term: its samples (requests of a single
    stream, releases of a concurrent cell) less one."""
    column = {"throughput_tps": "releases", "overlap": "releases",
              "paired_decode": "paired_rounds"}.get(figure, "samples")
    n = pd.to_numeric(rows.get(column, pd.Series(np.nan, index=rows.index)),
                      errors="coerce").to_numpy(float)
    return np.where(n >= 2, n - 1, intervals.UNBOUNDED)


def _pace(out: pd.DataFrame, rows: pd.Series, pace: Mapping[str, Any]) -> None:
    """Each row's decode relative to the calibration's mean for its cell, and the range
    of the calibration runs' own paces (PACE), where the calibration holds them."""
    levels, span = pace.get("levels") or {}, pace.get("runs")
    if not levels or not span:
        return
    level = np.array([levels.get(cell_key(r), np.nan) for _, r in out.loc[rows].iterrows()],
                     dtype=float)
    decode = pd.to_numeric(out.loc[rows, "decode_ms_per_token"], errors="coerce")
    out.loc[rows, PACE[0]] = decode.to_numpy(float) / level - 1
    out.loc[rows, PACE[1]], out.loc[rows, PACE[2]] = float(span[0]), float(span[1])


def pace_of(stacked: pd.DataFrame, keys: list[str]) -> dict:
    """Each cell's mean decode over the runs, and the range of the runs' own paces (each
    run's median over its cells of decode against that mean): what a run is checked
    against to say whether its day is one the terms saw (health/checks.pace_lines).
    `stacked`: the runs' ok cells, a `run` column apart; `keys`: what names a cell."""
    name = stacked[keys].astype(str).agg("/".join, axis=1)
    level = stacked.groupby(name)["decode_ms_per_token"].transform("mean")
    runs = (stacked["decode_ms_per_token"] / level - 1).groupby(stacked["run"]).median()
    levels = stacked.groupby(name)["decode_ms_per_token"].mean()
    return {"levels": {k: round(float(v), 5) for k, v in sorted(levels.items())},
            "runs": [round(float(runs.min()), 4), round(float(runs.max()), 4)]}


def pooled_pace(earlier: Mapping[str, Any], later: Mapping[str, Any]) -> dict:
    """Two batches' paces as one: each cell's mean weighted by the batches' runs, the
    runs' range the wider of the two (each relative to its own batch's means, not the
    pooled ones: an approximation; `--calibrate` over all the runs at once is exact);
    a batch without them, the other's."""
    a, b = earlier.get("pace") or {}, later.get("pace") or {}
    if not a or not b:
        return a or b
    na, nb = earlier["runs"], later["runs"]
    levels = {cell: round((na * a["levels"][cell] + nb * b["levels"][cell]) / (na + nb), 5)
              if cell in a["levels"] and cell in b["levels"]
              else a["levels"].get(cell, b["levels"].get(cell))
              for cell in sorted({**a["levels"], **b["levels"]})}
    return {"levels": levels, "runs": [min(a["runs"][0], b["runs"][0]),
                                       max(a["runs"][1], b["runs"][1])]}
