"""Service levels (`slo:`): which of a cell's requests meet the targets, the cell's
goodput, and per link and context the most concurrent streams that hold the level.

A request meets the level when it succeeded, its time to first token is at most
`ttft_ms` and its own decode tokens per second at least `tokens_per_s` (a target left
out is not held). A cell holds it when at least `share_pct` of its own requests (a
paired cell's reference requests are the baseline's) meet it; a failed request meets
nothing. Goodput (AIPerf's term) is the requests that met it per second of the cell's
measuring: from the first send to the last end of each repeat, summed.

Each cell also records the level it was judged at (`*_target`, `share_pct`) and what its
requests would have to be held to: the decode step (ms/token) and the time to first
token that `share_pct` of them stay within (`step_at_share_ms`, `ttft_at_share_ms`, with
a bootstrap standard error over requests). The what-if model (`whatif --slo`) predicts
from the baseline's step at the share, not its median: a level held by 90% of requests
is a level for the slow tenth.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from splitbench import results
from splitbench.analysis import percentiles
from splitbench.analysis.finding_text import Finding, listed

COLUMNS = [*results.CELL_KEYS, "requests", "met", "met_pct", "holds", "goodput_rps",
           "status", "ttft_ms_target", "tokens_per_s_target", "share_pct",
           "step_at_share_ms", "step_at_share_se", "ttft_at_share_ms", "ttft_at_share_se"]

def targets_set(slo: dict[str, Any] | None) -> bool:
    return bool(slo) and any(slo.get(k) is not None for k in ("ttft_ms", "tokens_per_s"))


def table(request_files: Sequence[str], slo: dict[str, Any] | None) -> pd.DataFrame:
    """One row per cell (COLUMNS); none where the config holds no target."""
    if not targets_set(slo):
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    for path in request_files:
        requests = percentiles.requests_of(path)
        reference = requests["reference"].fillna(False).astype(bool) \
            if "reference" in requests else pd.Series(False, index=requests.index)
        own = requests[~reference]
        if own.empty:
            continue
        met = meets(own, slo)
        share = 100 * met.sum() / len(own)
        wanted = float(slo.get("share_pct", 90.0))
        ok = own["status"] == "ok"
        # A failed request stays within no step and no wait.
        steps = (1000 / pd.to_numeric(own["decode_tps"], errors="coerce")).where(ok)
        waits = pd.to_numeric(own["ttft_ms"], errors="coerce").where(ok)
        rows.append({**{k: own[k].iat[0] for k in results.CELL_KEYS},
                     "requests": len(own), "met": int(met.sum()), "met_pct": float(share),
                     "holds": bool(share >= wanted),
                     "goodput_rps": _goodput(own, met),
                     "status": own["cell_status"].iloc[0] if "cell_status" in own
                     else None,
                     "ttft_ms_target": slo.get("ttft_ms"),
                     "tokens_per_s_target": slo.get("tokens_per_s"), "share_pct": wanted,
                     **dict(zip(("step_at_share_ms", "step_at_share_se"),
                                at_share(steps, wanted), strict=True)),
                     **dict(zip(("ttft_at_share_ms", "ttft_at_share_se"),
                                at_share(waits, wanted), strict=True))})
    return pd.DataFrame(rows, columns=COLUMNS)


def at_share(values: pd.Series, share_pct: float, seed: int = 0) -> tuple[float, float]:
    """The value that `share_pct` of the requests stay within (a failed request, NaN,
    stays within none: infinite) and its standard error over resamples of the
    requests (NaN from fewer than two; infinite where some resample is unbounded)."""
    finite = np.nan_to_num(values.to_numpy(dtype=float), nan=np.inf)
    if finite.size == 0:
        return np.nan, np.nan
    value = float(np.percentile(finite, share_pct, method="inverted_cdf"))
    if finite.size < 2:
        return value, np.nan
    draws = percentiles.resampled_quantiles([np.array([v]) for v in finite], (share_pct,),
                                            seed, "inverted_cdf")[:, 0]
    se = float(np.std(draws, ddof=1)) if np.isfinite(draws).all() else np.inf
    return value, se


def meets(requests: pd.DataFrame, slo: dict[str, Any]) -> pd.Series:
    """Whether each request met every target."""
    ok = requests["status"] == "ok"
    if slo.get("ttft_ms") is not None:
        ok &= pd.to_numeric(requests["ttft_ms"], errors="coerce") <= slo["ttft_ms"]
    if slo.get("tokens_per_s") is not None:
        ok &= pd.to_numeric(requests["decode_tps"], errors="coerce") >= slo["tokens_per_s"]
    return ok.fillna(False).astype(bool)


def _goodput(requests: pd.DataFrame, met: pd.Series) -> float | None:
    end = pd.to_numeric(requests.get("t_end_ns", requests["t_last_ns"]), errors="coerce")
    end = end.fillna(pd.to_numeric(requests["t_last_ns"], errors="coerce"))
    send = pd.to_numeric(requests["t_send_ns"], errors="coerce")
    repeat = requests["repeat"].fillna(0) if "repeat" in requests else 0
    spans = pd.DataFrame({"send": send, "end": end, "repeat": repeat}).groupby("repeat")
    seconds = float((spans["end"].max() - spans["send"].min()).sum()) / 1e9
    return float(met.sum() / seconds) if seconds > 0 else None


# --- the finding ---------------------------------------------------------------------------
def level_text(slo: dict[str, Any]) -> str:
    """"within 1000 ms to first token and 200 tokens/s per stream for 90% of requests"."""
    parts = []
    if slo.get("ttft_ms") is not None:
        parts.append(f"{slo['ttft_ms']:g} ms to first token")
    if slo.get("tokens_per_s") is not None:
        parts.append(f"{slo['tokens_per_s']:g} tokens/s per stream")
    return f"within {' and '.join(parts)} for {slo.get('share_pct', 90.0):g}% of requests"


def held_streams(cells: pd.DataFrame) -> str:
    """One link's cells at one context, by concurrency: the most streams up to which
    every level holds, and what happened at the next level."""
    cells = cells.sort_values("conc")
    levels = cells["conc"].tolist()
    held = 0
    for row in cells.itertuples():
        if not row.holds:
            break
        held = row.conc
    if held == levels[-1]:
        return f"holds all {held} measured stream{'s' if held > 1 else ''}"
    nxt = cells[cells["conc"] > held].iloc[0]
    if nxt["status"] not in (None, "ok") and not (isinstance(nxt["status"], float)
                                                   and np.isnan(nxt["status"])):
        why = f"at {_streams(nxt['conc'])} it ended {nxt['status']}"
    else:
        why = f"at {_streams(nxt['conc'])}, {nxt['met_pct']:.0f}% of requests meet it"
    if held == 0:
        return f"holds none ({why})"
    return f"holds {_streams(held)} ({why})"


def _streams(count: int) -> str:
    return f"{count} stream{'s' if count != 1 else ''}"


def findings(levels: pd.DataFrame, contexts: Sequence[str], slo: dict[str, Any],
             section: str, baseline: str | None) -> list[tuple[str, Finding]]:
    """A sentence per context, with its context: each link's most concurrent streams
    that hold the level (levels: this module's rows of one pair and model)."""
    out = []
    for ctx in [c for c in contexts if c in set(levels["ctx"])]:
        here = levels[levels["ctx"] == ctx]
        links = sorted(here["link"].unique(), key=lambda link: (link != baseline, link))
        said = [f"{link} {held_streams(here[here['link'] == link])}" for link in links]
        out.append((ctx, Finding(section, f"**At {ctx}, {level_text(slo)}: "
                                          f"{listed(said)}**.",
                                 ("[service levels](#table-service_levels)",))))
    return out
