"""What a link does to the tail of the gaps between tokens: does it widen it (jitter),
or move every gap alike (a fixed cost per step)?

Per cell of a link other than the baseline, against the baseline's gaps (a paired
cell's own reference requests, measured in the same rounds; else the baseline link's
cell of the same model, context and concurrency):

- each request's first gap, the one after prefill, is set apart (`first_gap_*`): every
  request has one, slower than the rest, and at one in 64 they are where a p99 of the
  gaps lands. Every other figure is of the steady gaps.
- the tail figure (`tail`): the p99 where each side has TAIL_BEYOND steady gaps beyond
  it (2,000), else the p95 (400), else none (`too_few`): a p99 of 1,260 gaps is their
  13 longest, one request's host stalls.
- the widening: how much more the tail figure moved than the median.
- stalls (`stalls`, `stalls_base`): the steady gaps over STALL_FACTOR x their side's
  median: above a quiet step's own spread, below a host stall of 1-5 ms on a
  sub-millisecond step.

Every ± is a 95% interval (intervals.LEVEL): half the span between the 2.5th and 97.5th
percentiles of the figure over DRAWS resamples of each side's whole requests, the two
sides drawn independently (a request's gaps are not independent of each other, and
stalls cluster in a few requests).

The verdict is one-sided: does the link widen the tail? A tail narrower than the
baseline's says something about the baseline's own host (its stalls), nothing about the
link: a note, never a finding. A run asks the question of each single-stream cell at
once (`comparisons`, m), and each is held to the false-alarm share that keeps the run's
at 1 - LEVEL (Šidák: 1 - LEVEL^(1/m) each, 0.85% of six). The link widens the tail where
that quantile of the widening's resamples lies above zero, its distance below the
widening stretched by sqrt(n / (n - 1)) for the n requests of the fewer side (resampling
n requests spreads a figure that much less than samples of n do): the widening is beyond
`widening_allowance_ms`, a threshold and never a ±. Where it is not, the other end of
the same one-sided interval bounds it (`widening_bound_ms`). A verdict needs MIN_REQUESTS
requests on each side: 10 are too few clusters to resample. Drawn as a machine with
clustered stalls (tests/unit/test_tail_shift.py; docs/method.md), two halves of one
machine are called apart in about the share allowed, where the former rule (two-sided,
its standard deviation x Šidák's normal quantile, the first gaps in) called a run's own
baseline requests, 10 against 10, different in 2% of splits against its 0.77%.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from splitbench.contracts import results
from splitbench.infra.intervals import LEVEL
from splitbench.summary import percentiles

MIN_REQUESTS = 20  # per side, for a verdict
TAIL_BEYOND = 20  # steady gaps a tail figure needs beyond it on each side
STALL_FACTOR = 3  # a stall: a steady gap over this many times its side's median
# Resamples per side: the one-sided quantile of a run of m comparisons is at
# 1 - LEVEL^(1/m), 0.85% at six, which 2000 draws place at their 17th.
DRAWS = 2000
HELD_LIMIT = 16_000_000  # values x requests counted at once (int32: 64 MB)
QUANTILES = (50, 95, 99)
DRAWN = "widening_draws"  # shifts' resampled widenings, for the run's allowance
FIGURES = [*results.CELL_KEYS, "baseline", "paired", "requests", "requests_base", "gaps",
           "gaps_base", "too_few", "tail", "p50_ms", "p99_ms", "tail_ms", "p50_delta_ms",
           "p50_delta_unc_ms", "p99_delta_ms", "p99_delta_unc_ms", "tail_delta_ms",
           "tail_delta_unc_ms", "widening_ms", "widening_unc_ms", "stalls", "stalls_base",
           "first_gap_ms", "first_gap_delta_ms", "first_gap_delta_unc_ms"]
COLUMNS = [*FIGURES, "comparisons", "widening_allowance_ms", "widening_bound_ms"]


def table(request_files: Sequence[str], baseline: str | None) -> pd.DataFrame:
    """One row per cell of a link other than `baseline` (COLUMNS)."""
    return with_allowance(shifts(request_files, baseline))


def shifts(request_files: Sequence[str], baseline: str | None) -> pd.DataFrame:
    """table's rows before the run's allowance (FIGURES, and each row's resampled
    widenings): each depends on its own cell and the baseline link's cell of the same
    keys alone (among `request_files`). The baseline link's files give no row."""
    cells: dict[tuple, str] = {}
    for path in request_files:
        key = _key(path)
        if key is not None:
            cells.setdefault(key, path)
    rows = []
    # A baseline cell is the reference of every other link's cell of its keys: its gaps
    # and their resamples are made once.
    bases: dict[str, Side] = {}
    for key, path in cells.items():
        pair, link, model, ctx, conc = key
        if baseline is None or link == baseline:
            continue
        requests = percentiles.requests_of(path)
        own = _gaps(path, requests, reference=False)
        base = _gaps(path, requests, reference=True)
        paired = bool(base)
        base_side = None
        if not paired and (pair, baseline, model, ctx, conc) in cells:
            other = cells[(pair, baseline, model, ctx, conc)]
            if other not in bases:
                bases[other] = side(_gaps(other, percentiles.requests_of(other),
                                          reference=False), seed=2)
            base_side = bases[other]
            base = base_side.requests
        if not own or not base:
            continue
        rows.append({"pair": pair, "link": link, "model": model, "ctx": ctx, "conc": conc,
                     "baseline": baseline, "paired": paired,
                     **shift(own, base, base_side)})
    return pd.DataFrame(rows, columns=[*FIGURES, DRAWN])


def with_allowance(rows: pd.DataFrame, comparisons: int | None = None) -> pd.DataFrame:
    """`rows` (shifts') with `comparisons` (the single-stream cells whose widening is
    judged, unless given), each widening's allowance at the false-alarm share that holds
    them all together and the bound on it (COLUMNS)."""
    draws = rows[DRAWN] if DRAWN in rows else pd.Series([None] * len(rows), index=rows.index)
    judged = (rows["conc"] == 1) & _judgeable(rows) & draws.map(_has_draws)
    count = max(int(judged.sum()) if comparisons is None else comparisons, 1)
    ends = np.array([one_sided(d, false_alarm_each(count)) for d in draws],
                    dtype=float).reshape(-1, 2)
    widening = pd.to_numeric(rows["widening_ms"]).to_numpy(dtype=float)
    # Resamples of n requests spread a figure sqrt((n - 1) / n) as far as samples of n
    # requests do: widened back, on the fewer side's n.
    fewer = np.minimum(rows["requests"], rows["requests_base"]).to_numpy(dtype=float)
    widen = np.sqrt(fewer / np.maximum(fewer - 1, 1))
    out = rows.drop(columns=[DRAWN], errors="ignore").copy()
    out["comparisons"] = count
    out["widening_allowance_ms"] = widen * (widening - ends[:, 0])
    out["widening_bound_ms"] = widening + widen * (ends[:, 1] - widening)
    return out


def false_alarm_each(count: int) -> float:
    """The share of false alarms each of `count` independent one-sided comparisons may
    have for the run's to be 1 - LEVEL (5% for one, 0.85% each of six)."""
    return 1 - LEVEL ** (1 / max(count, 1))


def one_sided(draws: object, alpha: float) -> tuple[float, float]:
    """The `alpha` and 1 - `alpha` quantiles of a row's resampled widenings: the lower
    end of the one-sided interval that a widening must clear, and the upper end that
    bounds it (NaN, NaN without draws)."""
    if not _has_draws(draws):
        return np.nan, np.nan
    values = np.asarray(draws, dtype=float)
    low, high = np.quantile(values[np.isfinite(values)], [alpha, 1 - alpha])
    return float(low), float(high)


def _has_draws(draws: object) -> bool:
    return draws is not None and np.ndim(draws) == 1 and bool(
        np.isfinite(np.asarray(draws, dtype=float)).sum() >= 2)


def _judgeable(rows: pd.DataFrame) -> pd.Series:
    """Rows with enough requests and enough steady gaps for a verdict."""
    return ((rows["requests"] >= MIN_REQUESTS) & (rows["requests_base"] >= MIN_REQUESTS)
            & ~rows["too_few"].astype(bool))


def _key(path: str) -> tuple | None:
    """(pair, link, model, ctx, conc) of a cell's requests file (None: not a cell's)."""
    try:
        found = results.identity(path)
    except ValueError:
        return None
    return tuple(found[k] for k in ("pair", "link", "model", "ctx", "conc")) \
        if "link" in found else None


def _gaps(path: str, requests: pd.DataFrame, reference: bool) -> list[np.ndarray]:
    """Each ok request's gaps (ms): the cell's own, or its paired reference's."""
    marked = requests["reference"].fillna(False).astype(bool) \
        if "reference" in requests else pd.Series(False, index=requests.index)
    chosen = requests[(requests["status"] == "ok") & (marked == reference)]
    if chosen.empty:
        return []
    gaps = percentiles.gaps_of(results.tokens_of(path), set(percentiles.request_keys(chosen)))
    return [gaps[k] for k in percentiles.request_keys(chosen) if k in gaps and len(gaps[k])]


@dataclass
class Side:
    """One side's gaps and their resamples: `quantiles` and `draws` (DRAWS x QUANTILES)
    of its steady gaps, `first` and `first_draws` the median of its first gaps."""
    requests: list[np.ndarray]
    steady: np.ndarray
    quantiles: np.ndarray
    draws: np.ndarray | None
    first: float
    first_draws: np.ndarray | None

    @property
    def stalls(self) -> int:
        return int((self.steady > STALL_FACTOR * self.quantiles[0]).sum())


def side(requests: list[np.ndarray], seed: int) -> Side:
    """A side's figures from each request's gaps (first gap included) and their
    resamples over whole requests (`seed`: the side's own, for independent draws)."""
    steady = [g[1:] for g in requests if len(g) > 1]
    first = [g[:1] for g in requests if len(g)]
    values = np.concatenate(steady) if steady else np.array([])
    return Side(requests, values,
                np.percentile(values, QUANTILES) if values.size else np.full(3, np.nan),
                _resampled(steady, QUANTILES, seed),
                float(np.median(np.concatenate(first))) if first else np.nan,
                _resampled(first, (50,), seed + 100))


def _resampled(per_request: list[np.ndarray], quantiles: tuple[float, ...], seed: int,
               draws: int = DRAWS) -> np.ndarray | None:
    """The `quantiles` (percent) of `draws` resamples of the requests, with replacement:
    one row per draw, the same figures as percentiles.resampled_quantiles (numpy's linear
    percentiles over each resample; the same draws at its BOOTSTRAP_DRAWS and seed).
    Each draw's k-th value in order is found by bisection over the sorted values,
    counting each request's values below a position: draws x requests per step, not
    draws x values, so that DRAWS resamples cost less than its 200. None from fewer
    than two requests: nothing to resample."""
    count = len(per_request)
    size = sum(len(v) for v in per_request)
    if count < 2 or not size:
        return None
    if size * count > HELD_LIMIT:  # the counts below would not fit: its draws, in chunks
        return np.vstack([percentiles.resampled_quantiles(per_request, quantiles, seed + i)
                          for i in range(0, draws, percentiles.BOOTSTRAP_DRAWS)])
    rng = np.random.default_rng(seed)
    weight = np.zeros((draws, count), dtype=np.int64)
    np.add.at(weight, (np.arange(draws)[:, None], rng.integers(0, count, (draws, count))), 1)
    lengths = np.array([len(v) for v in per_request])
    values = np.concatenate(per_request).astype(float)
    order = np.argsort(values, kind="stable")
    values, owner = values[order], np.repeat(np.arange(count), lengths)[order]
    # held[i, r]: how many of request r's values lie at or before position i in order.
    held = np.zeros((values.size, count), dtype=np.int32)
    held[np.arange(values.size), owner] = 1
    held = np.cumsum(held, axis=0, dtype=np.int32)
    total = weight @ lengths

    def running(at: np.ndarray) -> np.ndarray:
        """Each draw's count of drawn values at or before its position `at`."""
        return np.einsum("dr,dr->d", weight, held[at])

    def kth(k: np.ndarray) -> np.ndarray:
        """Each draw's k-th value (0-based) in order: the first position whose running
        count passes k."""
        low, high = np.zeros(draws, dtype=np.int64), np.full(draws, values.size)
        for _ in range(int(np.ceil(np.log2(values.size + 1)))):
            mid = (low + high) // 2
            passed = running(np.minimum(mid, values.size - 1)) > k
            open_ = low < high
            high = np.where(open_ & passed, mid, high)
            low = np.where(open_ & ~passed, mid + 1, low)
        return values[np.minimum(low, values.size - 1)]

    out = np.empty((draws, len(quantiles)))
    for j, q in enumerate(quantiles):
        at = q / 100 * (total - 1)
        low = np.floor(at)
        below, above = kth(low), kth(np.minimum(low + 1, total - 1))
        out[:, j] = below + (at - low) * (above - below)
    return out


def tail_of(gaps: int) -> str | None:
    """The tail figure that `gaps` steady gaps (the fewer side's) hold TAIL_BEYOND
    beyond: "p99", "p95" or none."""
    return next((f"p{q}" for q in (99, 95) if gaps >= TAIL_BEYOND * 100 / (100 - q)),
                None)


def shift(own: list[np.ndarray], base: list[np.ndarray], base_side: Side | None = None
          ) -> dict[str, object]:
    """The median's and the tail's change from `base` to `own` (each request's gaps,
    its first included) and the widening, with ± (`base_side`: base's, where already
    made) and the widening's resampled values (DRAWN)."""
    return compare(side(own, seed=1), base_side or side(base, seed=2))


def compare(mine: Side, theirs: Side) -> dict[str, object]:
    """shift's figures from the two sides (resampled with seeds of their own)."""
    tail = tail_of(min(mine.steady.size, theirs.steady.size))
    at = QUANTILES.index(int(tail[1:])) if tail else 2
    delta = mine.quantiles - theirs.quantiles
    out = {"requests": len(mine.requests), "requests_base": len(theirs.requests),
           "gaps": int(mine.steady.size), "gaps_base": int(theirs.steady.size),
           "too_few": tail is None, "tail": tail or "p99",
           "p50_ms": float(mine.quantiles[0]), "p99_ms": float(mine.quantiles[2]),
           "tail_ms": float(mine.quantiles[at]), "p50_delta_ms": float(delta[0]),
           "p99_delta_ms": float(delta[2]), "tail_delta_ms": float(delta[at]),
           "widening_ms": float(delta[at] - delta[0]),
           "stalls": mine.stalls, "stalls_base": theirs.stalls,
           "first_gap_ms": mine.first, "first_gap_delta_ms": mine.first - theirs.first,
           "first_gap_delta_unc_ms": _pm95(mine.first_draws, theirs.first_draws, 0)}
    if mine.draws is None or theirs.draws is None:
        return {**out, "p50_delta_unc_ms": np.nan, "p99_delta_unc_ms": np.nan,
                "tail_delta_unc_ms": np.nan, "widening_unc_ms": np.nan, DRAWN: None}
    drawn = mine.draws - theirs.draws
    widening = drawn[:, at] - drawn[:, 0]
    return {**out, "p50_delta_unc_ms": _halfwidth(drawn[:, 0]),
            "p99_delta_unc_ms": _halfwidth(drawn[:, 2]),
            "tail_delta_unc_ms": _halfwidth(drawn[:, at]),
            "widening_unc_ms": _halfwidth(widening), DRAWN: widening}


def _pm95(mine: np.ndarray | None, theirs: np.ndarray | None, column: int) -> float:
    if mine is None or theirs is None:
        return np.nan
    return _halfwidth(mine[:, column] - theirs[:, column])


def _halfwidth(draws: np.ndarray) -> float:
    """A 95% interval's half-width: half the span between the resamples' percentiles
    at (1 - LEVEL) / 2 and (1 + LEVEL) / 2."""
    finite = draws[np.isfinite(draws)]
    if finite.size < 2:
        return np.nan
    low, high = np.percentile(finite, [50 * (1 - LEVEL), 50 * (1 + LEVEL)])
    return float((high - low) / 2)


# --- the verdict --------------------------------------------------------------------------
WIDENS, BOUNDED, BASE_WIDER = "widens", "widens by at most", "baseline wider"
JUDGED = (WIDENS, BOUNDED, BASE_WIDER)
FEW_REQUESTS, TOO_FEW, UNKNOWN = "few requests", "too few", "unknown"

def verdict(row: pd.Series) -> str:
    """A row's verdict (with_allowance's): WIDENS, BOUNDED, BASE_WIDER, or why none
    (FEW_REQUESTS, TOO_FEW, UNKNOWN: no allowance, or a table made before it)."""
    if any(column not in row for column in ("requests", "tail", "widening_bound_ms")):
        return UNKNOWN
    if min(row["requests"], row["requests_base"]) < MIN_REQUESTS:
        return FEW_REQUESTS
    if row["too_few"]:
        return TOO_FEW
    allowance, bound = row["widening_allowance_ms"], row["widening_bound_ms"]
    if not (np.isfinite(allowance) and np.isfinite(bound)):
        return UNKNOWN
    if row["widening_ms"] > allowance:
        return WIDENS
    return BASE_WIDER if bound < 0 else BOUNDED
