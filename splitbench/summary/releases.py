"""A concurrent cell's releases (its N requests sent together, again and again): each
release's overlap and throughput, their medians and spread, and when an overlap is
impossible (flagged) or outside [0, 1] without a fault (marked)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from splitbench.backends import metrics
from splitbench.contracts.results import CELL_KEYS
from splitbench.infra import intervals

# Overlap above this is flagged where it has no ± (one release): N requests cannot
# finish sooner than one alone (1.0); the margin is T1's own spread between sequential
# requests. With a ± the flag is "above 1 beyond its ±" (report.tables).
OVERLAP_MAX = 1.05


def shots(requests: pd.DataFrame) -> pd.Series:
    """Each request's release within its repeat (`shot`); 0 for rows written before
    requests carried it (one release per repeat then)."""
    if "shot" not in requests:
        return pd.Series(0, index=requests.index)
    return requests["shot"].fillna(0).astype("int64")


# The release figures a concurrent cell's summary row takes from its releases.
RELEASE_COLUMNS = ["releases", "overlap", "overlap_se", "overlap_unc",
                   "overlap_unc_lower_bound", "throughput_tps_se", "throughput_tps_unc",
                   "prefill_share"]


def with_releases(summary: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """The summary with what a concurrent cell's releases give: its overlap, wall time and
    throughput, each the median over its releases (every repeat's), the standard error
    of overlap and throughput from their spread over the releases (`*_se`; `*_unc`:
    95% intervals (infra/intervals.py), NaN with fewer than two releases), the number of
    releases, and at every cell the single stream's prefill share (`prefill_share`:
    its median TTFT over its median request time, T1, at the same pair, link, model and
    context).

    A release's overlap is `metrics.overlap` of its own wall time against T1; releases
    with a missing or cut-short request have none (those classed `crash` only because
    decode fell below cell.crash_below_tps streamed every token: their wall time is real,
    and the seed reports their overlap, -0.2 at 100K x 4). Overlap's standard error adds
    T1's own (the spread of the single stream's requests), which moves every release's
    overlap together, in quadrature to the releases' spread. A cell of one release has
    no spread of its own: its ± is T1's part alone, a lower bound
    (`overlap_unc_lower_bound`), so that its figure still says how far it can be trusted
    at least.
    """
    singles = _single_streams(requests)
    table = releases(requests)
    out = summary.drop(columns=[c for c in RELEASE_COLUMNS if c in summary])
    at = pd.MultiIndex.from_frame(out[["pair", "link", "model", "ctx"]])
    out["prefill_share"] = singles["prefill_share"].reindex(at).to_numpy()
    if table.empty:
        for column in RELEASE_COLUMNS[:-1]:
            out[column] = np.nan
        return out
    table = table.join(singles[["t1_ms", "t1_se", "t1_n"]], on=["pair", "link", "model", "ctx"])
    table["overlap"] = [metrics.overlap(n, t1, wall) if whole and pd.notna(t1) else None
                        for n, t1, wall, whole in zip(
                            table["streams"], table["t1_ms"], table["wall_ms"],
                            table["complete"], strict=True)]
    table["overlap"] = pd.to_numeric(table["overlap"], errors="coerce")
    by_cell = table.groupby(CELL_KEYS)
    cells = pd.DataFrame({
        "releases": by_cell.size(),
        "wall_ms": by_cell["wall_ms"].median(),
        "throughput_tps": by_cell["throughput_tps"].median(),
        "throughput_tps_se": intervals.group_median_se(by_cell["throughput_tps"]),
        "overlap": by_cell["overlap"].median(),
        "release_se": intervals.group_median_se(by_cell["overlap"]),
        "t1_ms": by_cell["t1_ms"].first(),
        "t1_se": by_cell["t1_se"].first(),
        "t1_n": by_cell["t1_n"].first(),
    })
    # d overlap / d T1 = W / ((N - 1) T1^2): T1's error moves every release alike.
    conc = cells.index.get_level_values("conc").to_numpy()
    t1_term = cells["wall_ms"] / ((conc - 1) * cells["t1_ms"] ** 2) * cells["t1_se"]
    one = cells["release_se"].isna() & (t1_term > 0) & cells["overlap"].notna()
    release_dof = (cells["releases"] - 1).where(cells["releases"] >= 2).to_numpy(float)
    t1_dof = (cells["t1_n"] - 1).where(cells["t1_n"] >= 2, intervals.UNBOUNDED).to_numpy(float)
    se, dof = intervals.combined([cells["release_se"].to_numpy(float),
                                  t1_term.fillna(0.0).to_numpy(float)],
                                 [np.nan_to_num(release_dof, nan=intervals.UNBOUNDED), t1_dof])
    cells["overlap_se"] = pd.Series(se, index=cells.index).where(~one, t1_term)
    cells["overlap_unc"] = intervals.halfwidth(cells["overlap_se"].to_numpy(float),
                                               np.where(one, t1_dof, dof))
    cells["overlap_unc_lower_bound"] = one.where(cells["overlap_se"].notna())
    cells["throughput_tps_unc"] = intervals.halfwidth(
        cells["throughput_tps_se"].to_numpy(float), release_dof)
    keyed = out.set_index(CELL_KEYS)
    for column in ("releases", "overlap", "overlap_se", "overlap_unc",
                   "overlap_unc_lower_bound", "throughput_tps_se", "throughput_tps_unc"):
        keyed[column] = cells[column].reindex(keyed.index)
    # A concurrent cell's wall time and throughput are its releases' (not the span of
    # them all); a single stream keeps its cell-wide figures.
    for column in ("wall_ms", "throughput_tps"):
        mine = cells[column].reindex(keyed.index)
        if column in keyed:
            keyed[column] = mine.where(mine.notna(), keyed[column])
        else:
            keyed[column] = mine
    return keyed.reset_index()


# An overlap below 0 beyond its ± is flagged only where the single stream's prefill is
# under this share of its request time: there decode dominates, and N streams that take
# longer than N in a row point at a fault or noise. Where prefill dominates, requests
# queue for the same compute and worse than serial is a real result (the seed: -0.2 at
# 100K x 4).
PREFILL_SHARE_MAX = 0.25


def overlap_flag(value: Any, unc: Any, prefill_share: Any) -> str | None:
    """Why an overlap is impossible (the tables' ⚠), or None: above 1 beyond its ± (N
    requests cannot finish sooner than one alone), below 0 beyond its ± where prefill is
    under PREFILL_SHARE_MAX of a single request; without a ± (one release), above
    OVERLAP_MAX."""
    def finite(x: Any) -> bool:
        return x is not None and not pd.isna(x) and bool(np.isfinite(x))

    if not finite(value):
        return None
    if not finite(unc):
        return (f"{value:.2f} is above {OVERLAP_MAX:g}: more than fully concurrent"
                if value > OVERLAP_MAX else None)
    if value - unc > 1:
        return f"{value:.2f} ±{unc:.2f} is above 1 beyond its ±: more than fully concurrent"
    if value + unc < 0 and finite(prefill_share) and prefill_share < PREFILL_SHARE_MAX:
        return (f"{value:.2f} ±{unc:.2f} is below 0 beyond its ± where prefill is "
                f"{prefill_share:.0%} of a single request (under {PREFILL_SHARE_MAX:.0%}): "
                "worse than serial where the streams should overlap")
    return None


# The range an overlap lies in when nothing needs saying: 0 (serial) to 1 (fully
# concurrent), widened by the margin OVERLAP_MAX allows above 1, on both sides.
OVERLAP_MIN = 1 - OVERLAP_MAX


def overlap_outside(value: Any, unc: Any, prefill_share: Any) -> str | None:
    """Why an overlap outside [OVERLAP_MIN, OVERLAP_MAX] that `overlap_flag` does not
    flag is no fault (the tables' ‡), or None where it lies inside or is flagged."""
    def finite(x: Any) -> bool:
        return x is not None and not pd.isna(x) and bool(np.isfinite(x))

    if not finite(value) or OVERLAP_MIN <= value <= OVERLAP_MAX \
            or overlap_flag(value, unc, prefill_share):
        return None
    if not finite(unc):
        return f"{value:.2f} has no ± (no spread known), so it is not shown to be below 0"
    if value < 0 and value + unc >= 0:
        return f"{value:.2f} ±{unc:.2f} lies within its ± of 0 (serial)"
    if value > 1:
        return f"{value:.2f} ±{unc:.2f} lies within its ± of 1 (fully concurrent)"
    share = f"{prefill_share:.0%}" if finite(prefill_share) else "an unknown share"
    return (f"{value:.2f} ±{unc:.2f} is worse than serial where prefill is {share} of a "
            "single request: the requests queue for the same compute")


def releases(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per release of every concurrent cell (index: CELL_KEYS, repeat, shot):
    its wall time (first send to last token of its N requests), throughput (their tokens
    over it) and whether every request streamed all its tokens (`complete`). Rows
    written before requests carried their release's figures (`release_wall_ms`) had one
    release per repeat: the cell's own figures are that release's."""
    many = requests[(requests["conc"] > 1)
                    & ~requests.get("reference", pd.Series(False, index=requests.index))
                    .fillna(False).astype(bool)]
    keys = [*CELL_KEYS, "repeat", "shot"]
    if many.empty:
        return pd.DataFrame(columns=["wall_ms", "throughput_tps", "complete"],
                            index=pd.MultiIndex.from_tuples([], names=keys))
    if {"generated_tokens", "n_predict"} <= set(many.columns):
        whole = many["generated_tokens"] >= many["n_predict"]
    else:
        whole = many["status"] == "ok"
    many = many.reindex(columns=list(dict.fromkeys([
        *many.columns, "release_wall_ms", "release_throughput_tps", "cell_wall_ms",
        "cell_throughput_tps"]))).assign(shot=shots(many), whole=whole)
    numbers = ["release_wall_ms", "release_throughput_tps", "cell_wall_ms",
               "cell_throughput_tps"]
    many[numbers] = many[numbers].apply(pd.to_numeric, errors="coerce")
    table = many.groupby(keys).agg(
        wall_ms=("release_wall_ms", "first"), throughput_tps=("release_throughput_tps", "first"),
        cell_wall_ms=("cell_wall_ms", "first"),
        cell_throughput_tps=("cell_throughput_tps", "first"), complete=("whole", "all"))
    alone = table.groupby(level=[*CELL_KEYS, "repeat"])["complete"].transform("size") == 1
    for column in ("wall_ms", "throughput_tps"):
        table[column] = table[column].where(table[column].notna() | ~alone,
                                            table[f"cell_{column}"])
    table["streams"] = table.index.get_level_values("conc")
    return table.drop(columns=["cell_wall_ms", "cell_throughput_tps"])


def _single_streams(requests: pd.DataFrame) -> pd.DataFrame:
    """Per (pair, link, model, ctx): T1, the median wall time of the single stream's ok
    requests (ms), its standard error (`t1_se`, NaN with one request) and the share of
    it that is prefill (`prefill_share`: median TTFT / T1)."""
    singles = requests[(requests["conc"] == 1) & (requests["status"] == "ok")].assign(
        single_ms=lambda f: (f["t_last_ns"] - f["t_send_ns"]) / 1e6)
    if "ttft_ms" not in singles:
        singles = singles.assign(ttft_ms=np.nan)
    by = singles.groupby(["pair", "link", "model", "ctx"])
    out = pd.DataFrame({"t1_ms": by["single_ms"].median(),
                        "t1_se": intervals.group_median_se(by["single_ms"]),
                        "t1_n": by["single_ms"].count(),
                        "ttft_ms": by["ttft_ms"].median()})
    out["prefill_share"] = out["ttft_ms"] / out["t1_ms"]
    return out
