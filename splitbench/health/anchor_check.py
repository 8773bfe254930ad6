"""A model's drift anchors on a pair: each anchor's decode figure and temperature span,
and its block's start and end anchors compared (`health.drift` reads them)."""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import pandas as pd

from splitbench.contracts.slices import DriftSettings, InterferenceLimits
from splitbench.infra import interference, intervals
from splitbench.summary import cell_summary


class AnchorFigures(TypedDict):
    """An anchor's median decode ms/token, its standard error and temperature span (C)."""

    ms: float
    se: float
    n: int
    low: float
    high: float


def figures(requests: pd.DataFrame | None,
                    limits: InterferenceLimits) -> AnchorFigures | str:
    """Median decode ms/token, its standard error and the temperature span of one
    anchor; or, when it cannot serve as a reference, what is wrong with it."""
    if requests is None or len(requests) == 0:
        return "was not measured"
    if "decode_ms_per_token" not in requests:
        return "has no decode figure (results from an older splitbench)"
    ok = requests if "status" not in requests else requests[requests["status"].eq("ok")]
    if ok.empty:
        statuses = ", ".join(sorted(set(requests["status"].astype(str))))
        return f"has no ok request ({statuses})"
    decode = pd.to_numeric(ok["decode_ms_per_token"], errors="coerce").dropna()
    if decode.empty or decode.median() <= 0:
        shown = "none" if decode.empty else f"{decode.median():.3f} ms/token"
        return (f"gives no usable decode figure ({shown}: its tokens share one "
                "timestamp)")
    verdict = interference_verdict(requests, limits)
    if verdict["interference"]:
        return f"ran under interference ({verdict['interference']})"
    if verdict["interference_missing"]:
        return f"cannot show it measured only itself ({verdict['interference_missing']})"
    n = len(decode)
    # As cell_summary._uncertainty: the spread of the requests, floored by the per-token
    # dispersion (a few requests agreeing by chance must not claim more precision).
    tokens = pd.to_numeric(ok.get("decode_ms_se", pd.Series(dtype=float)), errors="coerce")
    se = np.fmax(intervals.median_se(decode)[0],
                 tokens.median() / np.sqrt(n) if tokens.notna().any() else np.nan)
    temps = [pd.to_numeric(requests[c], errors="coerce") for c in
             ("temp_before_c", "temp_after_c", "temp_peak_c") if c in requests]
    temps = pd.concat(temps) if temps else pd.Series(dtype=float)
    return {"ms": float(decode.median()), "se": float(se), "n": n,
            "low": float(temps.min()), "high": float(temps.max())}


def interference_verdict(requests: pd.DataFrame, limits: InterferenceLimits) -> pd.Series:
    """interference.flag's verdict on an anchor (its worst repeat): interference above
    the limits, or no figures to tell (then it cannot serve as a reference either)."""
    present = [c for c in cell_summary.CPU_FIGURES if c in requests]
    worst = (requests[present].apply(pd.to_numeric, errors="coerce").agg(
        {c: interference.across(c) for c in present}).to_frame().T
             if present else pd.DataFrame(index=[0]))
    for column in present:
        if not column.endswith(("_pct", "_cores")):  # text columns: the first row's
            worst[column] = requests[column].iloc[0]
    return interference.flag(worst, limits).iloc[0]


class AnchorComparison(TypedDict):
    """A block's start and end anchors compared (`compare`): its anchor_* columns."""

    anchor_start_ms: float
    anchor_end_ms: float
    anchor_change: float
    anchor_threshold: float
    anchor_drifted: bool
    anchor_thermal: bool
    anchor_temp_low_c: float
    anchor_temp_high_c: float
    anchor_text: str


def compare(start: AnchorFigures, end: AnchorFigures, cfg: DriftSettings,
             block: str) -> AnchorComparison:
    change = end["ms"] / start["ms"] - 1
    # Never tighter than what the anchors can resolve.
    # An anchor without a standard error (one request, no token timestamps) adds none.
    se, dof = intervals.combined([np.nan_to_num(start["se"]), np.nan_to_num(end["se"])],
                                 [start.get("n", 0) - 1, end.get("n", 0) - 1])
    noise = intervals.halfwidth(se, dof) / start["ms"] if se > 0 else 0.0
    threshold = float(np.fmax(cfg["anchor_tolerance"], noise))
    known = not any(np.isnan(v) for v in (start["low"], start["high"], end["low"], end["high"]))
    margin = cfg["anchor_margin_c"]
    thermal = known and (end["low"] > start["high"] + margin
                         or start["low"] > end["high"] + margin)
    return {
        "anchor_start_ms": start["ms"], "anchor_end_ms": end["ms"], "anchor_change": change,
        "anchor_threshold": threshold, "anchor_drifted": abs(change) > threshold,
        "anchor_thermal": thermal,
        "anchor_temp_low_c": min(start["low"], end["low"]) if known else np.nan,
        "anchor_temp_high_c": max(start["high"], end["high"]) if known else np.nan,
        "anchor_text": (f"anchor decode drifted {change:+.0%} ({start['ms']:.2f} -> "
                        f"{end['ms']:.2f} ms/token, limit ±{threshold:.0%}) over the "
                        f"{block} block"),
    }
