"""Pairs side by side: the same model, context and concurrency measured on two or more
pairs of machines, each with its own links' measured figures.

A pair is its own pair of machines (or namespaces), measured at its own time: its cells
are compared with its own baseline in the link comparison, never with another pair's.
Here the pairs' figures stand next to each other, each with its own uncertainty (the
summary's 95% intervals), its own flags (interference,
shared timestamps, a failed cell) and its own links' throughput and request-response
latency. A difference between two pairs includes everything that differs between the
machines (CPUs, clocks, load, the time of day), not only their links.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from splitbench.contracts.slices import InterferenceLimits
from splitbench.infra import interference
from splitbench.summary import between_runs
from splitbench.summary.cell_summary import joined

# What two pairs must share for their cells to stand side by side.
SHARED = ["model", "ctx", "conc"]

# The link results' figures shown beside each cell: throughput each way (median, and
# half the spread over repeats) and request-response p50 (64 B and 16 KB).
LINK_FIGURES = ["a_to_b_gbps", "a_to_b_gbps_min", "a_to_b_gbps_max", "b_to_a_gbps",
                "b_to_a_gbps_min", "b_to_a_gbps_max", "rr64_p50_us", "rr16k_p50_us"]


def pairs_of(summary: pd.DataFrame) -> list[str]:
    """The pairs with cells, sorted."""
    if summary.empty or "pair" not in summary:
        return []
    return sorted(summary["pair"].dropna().unique())


def shared(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary's cells of every (model, ctx, conc) that two or more pairs measured
    (whatever their status: a failed cell is a result too)."""
    if summary.empty:
        return summary
    count = summary.groupby(SHARED)["pair"].transform("nunique")
    return summary[count >= 2]


def link_facts(links: pd.DataFrame,
               interference_limits: InterferenceLimits | None = None) -> pd.DataFrame:
    """Per (pair, link): the throughput each way with its uncertainty (half the spread
    over repeats, as the links table shows it), the request-response p50s, and the
    link's flags (the verification's own, and interference while it was measured)."""
    facts = links.reindex(columns=list(dict.fromkeys(
        [*links.columns, "pair", "link", *LINK_FIGURES, "flags"])))
    out = pd.DataFrame({"pair": facts["pair"], "link": facts["link"]})
    for way in ("a_to_b", "b_to_a"):
        mid, low, high = (pd.to_numeric(facts[f"{way}_gbps{s}"], errors="coerce")
                          for s in ("", "_min", "_max"))
        out[f"{way}_gbps"] = mid
        out[f"{way}_gbps_unc"] = ((high - low) / 2).where(lambda v: v > 0)
    for column in ("rr64_p50_us", "rr16k_p50_us"):
        out[column] = pd.to_numeric(facts[column], errors="coerce")
    if len(facts):
        flagged = interference.flag(facts, interference_limits or {})
        out["link_flags"] = [joined(f, i, m) for f, i, m in zip(
            facts["flags"], flagged["interference"], flagged["interference_missing"],
            strict=True)]
    else:
        out["link_flags"] = pd.Series(dtype=object)
    return out.reset_index(drop=True)


def compare(summary: pd.DataFrame, links: pd.DataFrame, contexts: list[str],
            baseline_link: str | None = None,
            interference_limits: InterferenceLimits | None = None) -> pd.DataFrame:
    """One row per cell of every (model, ctx, conc) that two or more pairs measured,
    ordered model, context (shortest first), concurrency, link (the baseline first),
    pair: the cell's figures with their uncertainty (`*_unc`: the summary's 95% intervals,
    NaN where unknown), its status and flags, and its link's measured figures.

    decode tok/s takes its uncertainty from decode ms/token's (1000/x: ± x 1000/x²).
    """
    cells = shared(between_runs.with_unc(summary))
    columns = ["status", "flags", "decode_tps", "decode_ms_per_token", "decode_ms_unc",
               "prefill_tps", "prefill_tps_unc", "ttft_ms", "ttft_ms_unc", "overlap",
               "overlap_unc", "prefill_share", "throughput_tps", "throughput_tps_unc",
               "uncertainty_from", "samples"]
    cells = cells.reindex(columns=["pair", "link", *SHARED, *columns])
    numbers = [c for c in columns if c not in ("status", "flags", "uncertainty_from")]
    cells[numbers] = cells[numbers].apply(pd.to_numeric, errors="coerce")
    ms = cells["decode_ms_per_token"]
    cells = cells.assign(decode_tps_unc=cells["decode_ms_unc"] * 1000 / ms ** 2)
    cells = cells.merge(link_facts(links, interference_limits), on=["pair", "link"],
                        how="left")
    order = {c: i for i, c in enumerate(contexts)}
    cells = cells.assign(_ctx=cells["ctx"].map(order).fillna(len(order)),
                         _other=cells["link"] != baseline_link)
    cells = cells.sort_values(["model", "_ctx", "conc", "_other", "link", "pair"],
                              kind="stable")
    return cells.drop(columns=["_ctx", "_other"]).reset_index(drop=True)


def finite(value: Any) -> bool:
    return value is not None and not pd.isna(value) and bool(np.isfinite(value))
