"""Round trips per decoded token from a delay sweep.

The sweep (`splitbench.cells.roundtrips`) measures decode steps at several added
delays; the slope of decode ms/token against the measured request-response latency is
the number of blocking round trips A makes to its workers per decode step. The sweep
prints it as it ends; the round trips table (`splitbench.compare.roundtrips_table`)
and the mechanisms table use the same fit.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import pandas as pd

from splitbench.contracts.slices import InterferenceLimits
from splitbench.infra import fits, interference, intervals


class SweepFit(TypedDict):
    """A sweep's round trips per token (`fit`), its line and why it cannot be used, if so."""

    round_trips_per_token: float | None
    round_trips_se: float | None
    round_trips_dof: int
    intercept_ms: float | None
    r2: float | None
    points: int
    not_resolvable: str | None
    # The second witness: the median of every request's turns per token, counted from
    # the RPC connections' packets (None where none were counted: no CAP_NET_RAW).
    turns_per_token: float | None
    # The slope split by the same packets (None where no turn waited on every point): the
    # turns' waits per token, and host A's own time per token outside them, each in ms
    # per ms of latency. Their sum is the round trips; the waits alone would equal the
    # counted turns if each turn waited exactly the added latency.
    waits_per_latency: float | None
    waits_per_latency_se: float | None
    a_time_per_latency: float | None
    a_time_per_latency_se: float | None
    split_dof: int | None


def fit(frame: pd.DataFrame) -> SweepFit:
    """Round trips per token from a delay sweep, with the estimator the mechanisms table
    uses on links (`fits.fit_through_origin`): each point's decode step less the
    lowest-delay point's, against its measured latency less that point's, each
    difference weighted by its standard error. A sweep measured in rounds takes the
    differences within each round (a machine that slowed down slowed the whole round)
    and their median over rounds; an older sweep, each point's median against the
    lowest point's. The intercept is the line's decode step at zero latency, through the
    lowest-delay point."""
    step = "step_ms_median" if "step_ms_median" in frame else "decode_ms_per_token"
    ok = frame[frame["error"].isna() & frame[step].notna()]
    points = ok.groupby("delay_ms").agg(rr_ms=("rr_ms", "first"),
                                        decode=(step, "median")).sort_index()
    turns = _number(pd.to_numeric(ok.get("turns_per_token", pd.Series(dtype=float)),
                                  errors="coerce").median())
    if len(points) < 2:
        return {"round_trips_per_token": None, "round_trips_se": None, "round_trips_dof": 0,
                "intercept_ms": None, "r2": None, "points": len(points),
                "not_resolvable": f"{len(points)} delay point(s) measured",
                "turns_per_token": turns, **NO_SPLIT}
    rounds = "round" in ok and ok["round"].notna().all() and ok["round"].nunique() >= 2
    line = _slope(ok, points, step, rounds)
    slope = line["slope"]
    ref = points.iloc[0]
    return {"round_trips_per_token": _number(slope), "round_trips_se": _number(line["slope_se"]),
            # The fit's points (delays above the lowest) less one: its ±'s t factor.
            "round_trips_dof": max(line["n"] - 1, 0),
            "intercept_ms": _number(ref["decode"] - slope * ref["rr_ms"]),
            "r2": _number(line["r2"]), "points": len(points),
            "not_resolvable": _why_not(slope, line["slope_se"], line["r2"], line["n"]),
            "turns_per_token": turns, **_split(ok, points, step, rounds)}


NO_SPLIT = {"waits_per_latency": None, "waits_per_latency_se": None,
            "a_time_per_latency": None, "a_time_per_latency_se": None, "split_dof": None}


def _slope(ok: pd.DataFrame, points: pd.DataFrame, column: str, rounds: bool) -> dict:
    """The slope of `column` (ms per token) against the points' measured latency, each
    point's difference from the lowest-delay point's: within rounds where the sweep ran
    in rounds, else between the points' medians (`points` holds their latency)."""
    differences = (_within_rounds if rounds else _between_points)(ok, column)
    rest = points.loc[differences.index]
    return fits.fit_through_origin(rest["rr_ms"] - points["rr_ms"].iloc[0],
                                   differences["decode"], differences["se"])


def _split(ok: pd.DataFrame, points: pd.DataFrame, step: str, rounds: bool) -> dict:
    """The slope split in two by the packets: what the turns waited per token
    (turns x their median wait) and host A's own time per token (the step less that),
    each against the latency. None where a point has no turn waits (no packet socket,
    an older sweep)."""
    if "turn_wait_us" not in ok or "turns_per_token" not in ok:
        return dict(NO_SPLIT)
    waited = (pd.to_numeric(ok["turns_per_token"], errors="coerce")
              * pd.to_numeric(ok["turn_wait_us"], errors="coerce") / 1000)
    ok = ok.assign(waited_ms=waited, a_time_ms=ok[step] - waited).dropna(
        subset=["waited_ms"])
    if ok["delay_ms"].nunique() < len(points):
        return dict(NO_SPLIT)
    waits, own = (_slope(ok, points, c, rounds) for c in ("waited_ms", "a_time_ms"))
    return {"waits_per_latency": _number(waits["slope"]),
            "waits_per_latency_se": _number(waits["slope_se"]),
            "a_time_per_latency": _number(own["slope"]),
            "a_time_per_latency_se": _number(own["slope_se"]),
            "split_dof": max(waits["n"] - 1, 0)}


def flags(frame: pd.DataFrame, limits: InterferenceLimits | None) -> str | None:
    """Why a sweep's figure may hold the machine as well as the link (None where
    nothing says so): other work on either host above `limits` while its rounds ran, or
    none of that measured (a sweep from before the meter: not checked, never clean).
    Every row of a sweep carries the same figures."""
    verdict = interference.flag(frame.iloc[:1], limits or {}, "the sweep's rounds").iloc[0]
    parts = [x for x in (verdict["interference"], verdict["interference_missing"])
             if isinstance(x, str)]
    return "; ".join(parts) or None


def _within_rounds(ok: pd.DataFrame, step: str) -> pd.DataFrame:
    """Per delay above the lowest: the median over rounds of the round's step less the
    lowest delay's step in the same round, and that median's standard error."""
    by_round = ok.pivot_table(index="round", columns="delay_ms", values=step, aggfunc="median")
    lowest = by_round.columns.min()
    deltas = by_round.drop(columns=lowest).sub(by_round[lowest], axis=0)
    return pd.DataFrame({"decode": deltas.median(),
                         "se": deltas.agg(lambda d: intervals.median_se(d)[0])})


def _between_points(ok: pd.DataFrame, step: str) -> pd.DataFrame:
    """Per delay above the lowest: its median step less the lowest point's, with both
    medians' standard errors (points measured one after another)."""
    by_delay = ok.groupby("delay_ms")[step]
    points = by_delay.median().sort_index().to_frame("median")
    se = intervals.group_median_se(by_delay).reindex(points.index)
    return pd.DataFrame({"decode": points["median"].iloc[1:] - points["median"].iloc[0],
                         "se": np.hypot(se.iloc[1:], se.iloc[0])})


def _why_not(slope: float, se: float, r2: float, n: int) -> str | None:
    """Why a sweep's round trips cannot be used (None where they can): the rule the
    mechanisms table holds its fits to, and a count below zero, which no split makes
    (a machine whose speed wandered during the sweep gives one)."""
    reasons = [] if slope > 0 else [f"{slope:+.2f} round trips is below zero"]
    reasons += fits.unresolvable(slope, fits.slope_unc({"slope_se": se, "n": n}), r2,
                                 "latency")
    return "; ".join(reasons) or None


def _number(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None
