"""Service levels (`slo:`): which of a cell's requests meet the targets, how sure the
cell's share is, the cell's goodput, and per link and context the most concurrent
streams that hold the level.

A request meets the level when it succeeded, its time to first token is at most
`ttft_ms` and its own decode tokens per second at least `tokens_per_s` (a target left
out is not held); a failed request meets nothing, and a paired cell's reference requests
(the baseline's) are not the cell's. A cell's share of requests that met it (`met_pct`)
comes with its exact (Clopper-Pearson) 95% interval (`met_low_pct`, `met_high_pct`:
infra.intervals.share_interval), and the cell is judged against `share_pct` by that
interval, not by the share alone: five of five met shows only that at least 48% would.

- `verdict` "holds" where the interval's lower end is at or above `share_pct`, "fails"
  where its upper end is below it, "not resolvable" otherwise; `holds` is True or False
  where resolved and missing (NA) where not.
- `requests_needed`, for a cell not resolvable: about how many requests would resolve
  it at its observed share (none missing: intervals.requests_to_show, 36 for 90%; by
  releases, the releases needed times the requests a release holds); NA where no
  number would (a share exactly at the level, or a level of 100%).
- The sample unit (`sample_unit`, `releases`): a concurrent cell sends its requests in
  releases of `conc` at once, and a release's requests are not interchangeable (in one
  release the first request decodes while the next one's prompt is processed), so they
  are not independent draws. Where the rows carry their release (`shot`) and conc > 1,
  the interval is the conservative one at the release count, as if each release were
  one draw: k = floor(releases x share) of n = releases, wider than the requests'
  interval wherever a release holds several. `met_pct` stays the requests' share;
  `releases` is counted wherever the rows say.

Goodput (AIPerf's term) is the requests that met the level per second of the cell's
measuring: from the first send to the last end of each repeat, summed. Its ±
(`goodput_rps_unc`) is the share's interval times the cell's requests per second, taken
on the interval's wider side of the share so that it covers both ends.

Each cell also records the level it was judged at (`*_target`, `share_pct`) and what its
requests would have to be held to: the decode step (ms/token) and the time to first
token that `share_pct` of them stay within (`step_at_share_ms`, `ttft_at_share_ms`, with
a bootstrap standard error over requests). The what-if model (`whatif --slo`) predicts
from the baseline's step at the share, not its median: a level held by 90% of requests
is a level for the slow tenth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from splitbench.contracts import results
from splitbench.infra import intervals
from splitbench.summary import cell_summary, percentiles

COLUMNS = [*results.CELL_KEYS, "requests", "met", "met_pct", "met_low_pct", "met_high_pct",
           "verdict", "holds", "requests_needed", "sample_unit", "releases", "goodput_rps",
           "goodput_rps_unc", "status", "ttft_ms_target", "tokens_per_s_target",
           "share_pct", "step_at_share_ms", "step_at_share_se", "ttft_at_share_ms",
           "ttft_at_share_se"]
HOLDS, FAILS, UNRESOLVED = "holds", "fails", "not resolvable"
# A release: the requests sent at once (`shot`) in one round of one repeat.
RELEASE_KEYS = ("repeat", "round", "shot")
# requests_needed: counts walked one by one past a cell's own (a check takes a few ms),
# and beyond this many, a share this close to the level counts as never resolved.
SCANNED = 200
MOST_NEEDED = 10_000_000


def targets_set(slo: dict[str, Any] | None) -> bool:
    return bool(slo) and any(slo.get(k) is not None for k in ("ttft_ms", "tokens_per_s"))


def table(request_files: Sequence[str], slo: dict[str, Any] | None) -> pd.DataFrame:
    """One row per cell (COLUMNS); none where the config holds no target."""
    if not targets_set(slo):
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    for path in request_files:
        requests = with_releases(path, percentiles.requests_of(path))
        reference = requests["reference"].fillna(False).astype(bool) \
            if "reference" in requests else pd.Series(False, index=requests.index)
        own = requests[~reference]
        if own.empty:
            continue
        met = meets(own, slo)
        wanted = float(slo.get("share_pct", 90.0))
        ok = own["status"] == "ok"
        # A failed request stays within no step and no wait.
        steps = (1000 / pd.to_numeric(own["decode_tps"], errors="coerce")).where(ok)
        waits = pd.to_numeric(own["ttft_ms"], errors="coerce").where(ok)
        count = release_count(own)
        by_release = count is not None and int(own["conc"].iat[0]) > 1
        verdict = judged(int(met.sum()), len(own), wanted, count if by_release else None)
        rows.append({**{k: own[k].iat[0] for k in results.CELL_KEYS},
                     "requests": len(own), "met": int(met.sum()), **verdict,
                     "releases": count, **_goodput(own, met, verdict),
                     "status": own["cell_status"].iloc[0] if "cell_status" in own
                     else None,
                     "ttft_ms_target": slo.get("ttft_ms"),
                     "tokens_per_s_target": slo.get("tokens_per_s"), "share_pct": wanted,
                     **dict(zip(("step_at_share_ms", "step_at_share_se"),
                                at_share(steps, wanted), strict=True)),
                     **dict(zip(("ttft_at_share_ms", "ttft_at_share_se"),
                                at_share(waits, wanted), strict=True))})
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.astype({"holds": "boolean", "requests_needed": "Int64",
                         "releases": "Int64"})


def judged(met: int, requests: int, share_pct: float,
           releases: int | None = None) -> dict[str, Any]:
    """A cell's share of requests that met the level, its 95% interval and its verdict
    against `share_pct` (see the module's docstring). With `releases` (a concurrent
    cell's release count) the interval is the share's at that count, k = floor(releases
    x share) of releases: its requests are not independent draws, its releases are."""
    units = releases if releases is not None else requests
    k = met * units // requests if releases is not None else met
    low, high = (100 * end for end in intervals.share_interval(k, units))
    verdict = (HOLDS if low >= share_pct else FAILS if high < share_pct else UNRESOLVED)
    needed = None
    if verdict == UNRESOLVED:
        more = units_needed(met, requests, share_pct, releases)
        needed = None if more is None else math.ceil(more * requests / units)
    return {"met_pct": 100 * met / requests, "met_low_pct": low, "met_high_pct": high,
            "verdict": verdict, "holds": None if verdict == UNRESOLVED else verdict == HOLDS,
            "requests_needed": needed,
            "sample_unit": "releases" if releases is not None else "requests"}


def units_needed(met: int, total: int, share_pct: float,
                 releases: int | None = None) -> int | None:
    """About how many requests at the observed share, `met` of `total` requests, would
    resolve the level (or with `releases`, how many releases, by the release rule): none
    missing, intervals.requests_to_show; else the smallest n at which the interval of
    round(share x n) of n (floor(share x n) by releases) lies wholly above or below
    `share_pct`. The rounded count makes that a saw tooth in n, so the search walks n up
    one by one, up to SCANNED past the cell's own count; past that (a share within a few
    points of the level) it doubles and halves, which finds the edge only to within a
    tooth. None where no n does: a share exactly at the level, a level of 100%, or past
    MOST_NEEDED."""
    level = share_pct / 100
    if total <= 0 or level >= 1:
        return None
    if met >= total:
        return intervals.requests_to_show(level)
    if met * 100 == share_pct * total:
        return None

    def resolves(n: int) -> bool:
        # floor(share x n), or share x n rounded half up, in integers
        k = met * n // total if releases else (2 * met * n + total) // (2 * total)
        low, high = intervals.share_interval(k, n)
        return low >= level or high < level

    own = releases or total
    for n in range(own + 1, own + SCANNED + 1):
        if resolves(n):
            return n
    short, enough = own + SCANNED, 2 * (own + SCANNED)
    while not resolves(enough):
        short, enough = enough, 2 * enough
        if enough > MOST_NEEDED:
            return None
    while enough - short > 1:
        middle = (short + enough) // 2
        short, enough = (short, middle) if resolves(middle) else (middle, enough)
    return enough


def with_releases(path: str, requests: pd.DataFrame) -> pd.DataFrame:
    """`requests` with each row's release (RELEASE_KEYS), read from the same file where
    the shared frame leaves them out; as it is where the file has none."""
    if "shot" in requests:
        return requests
    extra = cell_summary.read_requests([path], ["shot", "round"])
    if "shot" not in extra or len(extra) != len(requests):
        return requests
    return requests.assign(**{k: extra[k].to_numpy() for k in ("shot", "round")
                              if k in extra})


def release_count(requests: pd.DataFrame) -> int | None:
    """How many releases the rows were sent in (None where they do not say)."""
    if "shot" not in requests or requests["shot"].isna().all():
        return None
    keys = [k for k in RELEASE_KEYS if k in requests]
    return len(requests[keys].drop_duplicates())


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


def _goodput(requests: pd.DataFrame, met: pd.Series,
             verdict: dict[str, Any]) -> dict[str, float | None]:
    """The met requests per second of measuring, and its ±: the share's interval
    (`verdict`, judged's) on its wider side of the share, times the requests per
    second."""
    end = pd.to_numeric(requests.get("t_end_ns", requests["t_last_ns"]), errors="coerce")
    end = end.fillna(pd.to_numeric(requests["t_last_ns"], errors="coerce"))
    send = pd.to_numeric(requests["t_send_ns"], errors="coerce")
    repeat = requests["repeat"].fillna(0) if "repeat" in requests else 0
    spans = pd.DataFrame({"send": send, "end": end, "repeat": repeat}).groupby("repeat")
    seconds = float((spans["end"].max() - spans["send"].min()).sum()) / 1e9
    if not seconds > 0:
        return {"goodput_rps": None, "goodput_rps_unc": None}
    share = verdict["met_pct"]
    wider = max(share - verdict["met_low_pct"], verdict["met_high_pct"] - share, 0.0)
    return {"goodput_rps": float(met.sum() / seconds),
            "goodput_rps_unc": wider / 100 * len(requests) / seconds}
