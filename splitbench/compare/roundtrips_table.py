"""The round trips per decoded token table: one row per delay sweep, from its fit
(`splitbench.cells.sweep_fit`)."""

from __future__ import annotations

from typing import TypedDict

import pandas as pd

from splitbench.cells.sweep_fit import fit, flags
from splitbench.contracts.marks import FLAG_MARK
from splitbench.contracts.slices import InterferenceLimits
from splitbench.infra import intervals
from splitbench.summary import cell_summary


def table(files: list[str], limits: InterferenceLimits | None = None) -> pd.DataFrame:
    """One row per (pair, model, workers): the measured round trips per token, flagged
    where other work used the machines while its rounds ran (`limits`)."""
    rows = []
    for path in files:
        frame = pd.read_parquet(path)
        result = fit(frame)
        first = frame.iloc[0]
        rows.append({
            "pair": first["pair"], "model": first["model"], "workers": int(first["workers"]),
            "round trips per token": cell_summary.rounded(result["round_trips_per_token"], 2),
            "±": cell_summary.rounded(intervals.halfwidth(result["round_trips_se"],
                                                           result["round_trips_dof"]), 2)
            if result["round_trips_se"] is not None else None,
            "R²": cell_summary.rounded(result["r2"], 3),
            # The second witness, which needs no delay: turns counted from the packets.
            "turns per token (packets)": cell_summary.rounded(result["turns_per_token"], 2),
            # The slope split by the same packets: what the turns waited, what host A
            # spent outside them, each per ms of latency (their sum is the slope).
            "of which turns' waits": _with_unc(result["waits_per_latency"],
                                               result["waits_per_latency_se"],
                                               result["split_dof"]),
            "of which host A's own": _with_unc(result["a_time_per_latency"],
                                               result["a_time_per_latency_se"],
                                               result["split_dof"]),
            "points": result["points"],
            **_measured_range(frame),
            # Where the figure cannot be used: the mechanisms table does not use it.
            "not resolvable": result["not_resolvable"] or "—",
            "flags": f"{FLAG_MARK} {flagged}" if (flagged := flags(frame, limits)) else None,
        })
    return pd.DataFrame(rows)


def _with_unc(value: float | None, se: float | None, dof: int | None) -> str:
    """`1.01 ±0.01` (a 95% interval at the fit's degrees of freedom), or "—" where the
    packets gave no split."""
    if value is None or se is None or not dof:
        return "—"
    return f"{value:.2f} ±{intervals.halfwidth(se, dof):.2f}"


# A sweep's measured range (`_measured_range`), by column title: "—" where no point
# was measured.
MeasuredRange = TypedDict("MeasuredRange", {
    "decode step at lowest latency (ms)": float | None,
    "latency range (ms)": str,
    "delay by": str,
})


def _measured_range(frame: pd.DataFrame) -> MeasuredRange:
    """The sweep's lowest decode step, its latency range and the delay mechanism at its
    largest delay (the zero-delay point has none); "—" where no point was measured (a
    pair without llama.cpp: its row's error says why)."""
    measured = frame.dropna(subset=["rr_ms"]) if "rr_ms" in frame else frame.iloc[0:0]
    if measured.empty:
        return {"decode step at lowest latency (ms)": None, "latency range (ms)": "—",
                "delay by": "—"}
    steps = measured.groupby("rr_ms")["step_ms_median"].median()
    return {
        "decode step at lowest latency (ms)": cell_summary.rounded(steps.iloc[0], 3),
        "latency range (ms)": f"{measured['rr_ms'].min():.3f}–{measured['rr_ms'].max():.3f}",
        "delay by": measured.loc[measured["delay_ms"].idxmax(), "emulation_delay"],
    }
