"""Link comparison rows with the prediction's columns, as the findings receive them
(tests/unit/test_findings.py, test_cost_constancy.py), and a summary's comparison as the
tables, charts and findings read it."""

from __future__ import annotations

import numpy as np
import pandas as pd

CONTEXTS = ["short", "5k", "32k"]


def comp_rows(link: str, deltas: list[tuple[float, float]], *, latency=(np.nan, np.nan),
              bandwidth=(np.nan, np.nan), trips=np.nan, gap_us=np.nan,
              compared="paired (20 rounds)", steps=(0.85, 5.0, 20.0),
              statuses=None) -> pd.DataFrame:
    """Link comparison rows of one model and link (shortest context first) with the
    prediction's columns, as findings.collect receives them."""
    rows = []
    for i, (ctx, (delta, unc)) in enumerate(zip(CONTEXTS, deltas, strict=False)):
        predicted = latency[0] + np.nan_to_num(bandwidth[0])
        rows.append({
            "pair": "lab", "model": "m", "ctx": ctx, "link": link, "baseline": "base",
            "status": (statuses or ["ok"] * 3)[i], "status_base": "ok",
            "decode_delta_ms": delta, "decode_delta_unc_ms": unc,
            "decode_ms_per_token_base": steps[i], "decode_lower_bound": False,
            "compared": compared, "prefill_change_pct": np.nan,
            "prefill_change_unc_pct": np.nan,
            "predicted_latency_ms": latency[0], "predicted_latency_unc_ms": latency[1],
            "predicted_bandwidth_ms": bandwidth[0], "predicted_bandwidth_unc_ms": bandwidth[1],
            "predicted_decode_delta_ms": predicted,
            "predicted_decode_delta_unc_ms": float(np.hypot(latency[1],
                                                            np.nan_to_num(bandwidth[1]))),
            "round_trips": trips, "latency_delta_us": gap_us,
        })
    return pd.DataFrame(rows)


def compared(summary: pd.DataFrame, baseline: str | None = None,
             drift: pd.DataFrame | None = None, prediction=None) -> pd.DataFrame:
    """A summary's link comparison as a run's `aggregate` writes it (run_comparison),
    with `prediction` (rows -> predicted_decode_delta's columns) beside each row where
    given: for the tests of the tables, charts and findings that read it."""
    from splitbench.compare.comparison import compare_links

    comp = compare_links(summary, baseline, drift)
    if prediction is not None and len(comp):
        comp = pd.concat([comp, prediction(comp)], axis=1)
    return comp
