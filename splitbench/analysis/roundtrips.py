"""Round trips per decoded token from a delay sweep: the fit and its table.

The sweep (`splitbench.cells.delay_sweep`) measures decode steps at several added
delays; the slope of decode ms/token against the measured request-response latency is
the number of blocking round trips A makes to its workers per decode step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from splitbench.analysis import fits
from splitbench.report import tables


def fit(frame: pd.DataFrame) -> dict[str, Any]:
    """Theil-Sen fit of each point's median decode step (ms) against measured rr_ms, and
    the slope's standard error from every request's scatter about the line (each
    request a separate sample: n - 2 degrees of freedom)."""
    step = "step_ms_median" if "step_ms_median" in frame else "decode_ms_per_token"
    ok = frame[frame["error"].isna() & frame[step].notna()]
    points = ok.groupby("delay_ms").agg(rr_ms=("rr_ms", "first"), decode=(step, "median"))
    if len(points) < 2:
        return {"round_trips_per_token": None, "round_trips_se": None, "intercept_ms": None,
                "r2": None, "points": len(points)}
    intercept, slope, r2 = fits.theil_sen(points["rr_ms"], points["decode"])
    x, y = ok["rr_ms"].to_numpy(float), ok[step].to_numpy(float)
    spread = np.sum((x - x.mean()) ** 2)
    se = (float(np.sqrt(np.sum((y - intercept - slope * x) ** 2) / (len(x) - 2) / spread))
          if len(x) > 2 and spread > 0 else None)
    return {"round_trips_per_token": slope, "round_trips_se": se, "intercept_ms": intercept,
            "r2": r2, "points": len(points)}


def table(files: list[str]) -> pd.DataFrame:
    """One row per (pair, model, workers): the measured round trips per token."""
    rows = []
    for path in files:
        frame = pd.read_parquet(path)
        result = fit(frame)
        first = frame.iloc[0]
        rows.append({
            "pair": first["pair"], "model": first["model"], "workers": int(first["workers"]),
            "round trips per token": tables.rounded(result["round_trips_per_token"], 2),
            "±": tables.rounded(tables.COVERAGE * result["round_trips_se"], 2)
            if result["round_trips_se"] is not None else None,
            "R²": tables.rounded(result["r2"], 3),
            "points": result["points"],
            "decode step at lowest latency (ms)": tables.rounded(
                frame.groupby("rr_ms")["step_ms_median"].median().iloc[0], 3),
            "latency range (ms)": f"{frame['rr_ms'].min():.3f}–{frame['rr_ms'].max():.3f}",
            # The mechanism at the largest delay (the zero-delay point has none).
            "delay by": frame.loc[frame["delay_ms"].idxmax(), "emulation_delay"],
        })
    return pd.DataFrame(rows)


