"""What every ± in splitbench means, in one place: the half-width of a 95% confidence
interval, from scipy.stats at the figure's own sample size.

- a median of n samples: its distribution-free interval (order statistics, as
  scipy.stats' quantile_test) from 6 samples, Student's t with n - 1 degrees of freedom
  times MEDIAN_SE x sd / sqrt(n) below (`median_se`); a mean: t times its standard error;
- a difference or sum of figures with their own standard errors: t with the
  Welch-Satterthwaite degrees of freedom of their combined variance (`combined`);
- a share of requests: the exact (Clopper-Pearson) binomial interval (`share_interval`);
- a quantile or a ratio: a bootstrap over the samples (summary.percentiles).

A standard error is never printed on its own; a column named `*_se` holds one, `*_unc`
the ± of the same figure. Thresholds that are not a ± (a prediction "disagrees", a cost
"grows", a tail "widens") are stated apart, in docs/method.md.

The quantiles are scipy.stats' own (its t, chi2 and binomtest compute them with these
scipy.special functions; tests/unit/test_intervals.py holds each equal to scipy.stats),
imported where first needed: importing scipy.stats takes 0.7 s, paid by each of a run's
fifty-odd `python -m splitbench` processes, most of which print no ±.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

LEVEL = 0.95  # every ± is the half-width of an interval at this confidence
MEDIAN_SE = 1.2533  # standard error of a median of n normal samples: this x sd / sqrt(n)

# A standard error whose degrees of freedom are unknown or unbounded (a fit over many
# points, a term calibrated over many runs): the normal quantile.
UNBOUNDED = np.inf


def t_factor(dof: Any) -> Any:
    """How many standard errors a ± is at `dof` degrees of freedom (12.71 at 1, 2.26 at
    9, 1.96 unbounded); NaN below 1. Scalars give a float, arrays an array."""
    from scipy import special

    d = np.asarray(dof, dtype=float)
    out = np.where(d >= 1, special.stdtrit(np.where(d >= 1, d, 1.0), 0.5 + LEVEL / 2),
                   np.nan)
    return float(out) if out.ndim == 0 else out


def as_se(unc: Any) -> Any:
    """The standard error a ± stands for where its degrees of freedom are not carried
    along (a weight in a fit, a term propagated into another figure): its normal part,
    the ± over 1.96. The ± computed from it again is at least as wide as before."""
    return np.asarray(unc, dtype=float) / t_factor(UNBOUNDED) if np.ndim(unc) \
        else float(unc) / t_factor(UNBOUNDED)


def halfwidth(se: Any, dof: Any) -> Any:
    """The ± of a figure with standard error `se` at `dof` degrees of freedom."""
    return np.asarray(se, dtype=float) * t_factor(dof) if np.ndim(se) or np.ndim(dof) \
        else float(se) * t_factor(dof)


@functools.lru_cache(maxsize=4096)
def median_ranks(n: int) -> tuple[int, int] | None:
    """The order statistics (1-based ranks) that bound the distribution-free 95%
    interval of a median of `n` samples: the largest lower rank l whose binomial tail
    P(Binomial(n, 1/2) < l) is at most (1 - LEVEL) / 2, and n + 1 - l (scipy.stats'
    quantile_test gives the same: 6 and 15 of 20, 2 and 9 of 10); None below 6, where
    even the smallest and largest do not hold the median 95% of the time. Cached: the
    aggregate asks it once per cell and figure, of a handful of sample sizes."""
    from scipy import special

    tail = (1 - LEVEL) / 2
    lower = 0
    while lower < n // 2 and special.bdtr(lower, n, 0.5) <= tail:
        lower += 1
    return (lower, n + 1 - lower) if lower >= 1 else None


def median_se(values: Sequence[float]) -> tuple[float, int]:
    """The standard error of the median of the finite `values`, and their count: from
    6 values, half the width of the median's distribution-free interval (`median_ranks`)
    over t at n - 1 degrees of freedom, so that its ± is that half-width again; below
    6, MEDIAN_SE x sd / sqrt(n); NaN from fewer than two. One stalled sample (a request
    at 4x the pace of the others) moves the interval by one rank, where it widened an
    sd-based error by its whole size."""
    finite = np.sort(_finite(values))
    n = int(finite.size)
    if n < 2:
        return np.nan, n
    ranks = median_ranks(n)
    if ranks is None:
        return float(MEDIAN_SE * finite.std(ddof=1) / np.sqrt(n)), n
    low, high = finite[ranks[0] - 1], finite[ranks[1] - 1]
    return float((high - low) / 2 / t_factor(n - 1)), n


def group_median_se(grouped: Any) -> Any:
    """`median_se` of each group of a pandas groupby (each column of a DataFrameGroupBy),
    NaN with fewer than two values."""
    return grouped.agg(lambda values: median_se(values)[0])


def median_halfwidth(values: Sequence[float]) -> float:
    """The ± of the median of the finite `values` (NaN from fewer than two)."""
    se, n = median_se(values)
    return halfwidth(se, n - 1) if n >= 2 else np.nan


def combined(ses: Sequence[Any], dofs: Sequence[Any]) -> tuple[Any, Any]:
    """The standard error of a sum or difference of independent figures (`ses`, each
    with its `dofs`) and its Welch-Satterthwaite degrees of freedom. A term with no
    standard error (NaN) leaves the sum unknown (NaN): pass 0 for a term known to be
    absent. A term of unbounded (or unknown, <= 0) degrees of freedom adds its variance
    but nothing to the dof's denominator. Arrays are combined element by element."""
    variances = [np.asarray(s, dtype=float) ** 2 for s in ses]
    total = sum(variances)
    parts = []
    for variance, dof in zip(variances, dofs, strict=True):
        d = np.asarray(dof, dtype=float)
        bounded = np.isfinite(d) & (d > 0)
        parts.append(np.where(bounded, variance ** 2 / np.where(bounded, d, 1.0), 0.0))
    denominator = sum(parts)
    with np.errstate(divide="ignore", invalid="ignore"):
        dof = np.where(denominator > 0, total ** 2 / denominator, UNBOUNDED)
    se = np.sqrt(total)
    if se.ndim == 0:
        return float(se), float(dof)
    return se, dof


def sd_upper(sd: float, n: int, confidence: float = LEVEL) -> float:
    """A one-sided upper confidence bound of a standard deviation `sd` from `n` samples
    (chi-square): the spread the samples may really have, not the one they happened to
    show. NaN from fewer than two."""
    from scipy import special

    if n < 2 or not np.isfinite(sd):
        return np.nan
    # chdtri(k, q): the chi-square quantile whose upper tail is q.
    return float(sd * np.sqrt((n - 1) / special.chdtri(n - 1, confidence)))


def share_interval(met: int, total: int) -> tuple[float, float]:
    """The exact (Clopper-Pearson) 95% interval of a share, as fractions: `met` of
    `total` (NaN, NaN with no total)."""
    from scipy import special

    if total <= 0:
        return np.nan, np.nan
    k, n, tail = int(met), int(total), (1 - LEVEL) / 2
    low = 0.0 if k == 0 else float(special.betaincinv(k, n - k + 1, tail))
    high = 1.0 if k == n else float(special.betaincinv(k + 1, n - k, 1 - tail))
    return low, high


def t_sf(t: Any, dof: Any) -> Any:
    """The upper tail of Student's t at `t` (for a p-value: 2 x t_sf(|t|, dof))."""
    from scipy import special

    return special.stdtr(dof, -np.asarray(t, dtype=float))


def requests_to_show(share: float) -> int:
    """How many requests, none of them missing the level, put the lower end of
    `share_interval` at or above `share` (a fraction): the smallest n with share^n <=
    (1 - LEVEL) / 2 (36 for 90%, 59 for 95%)."""
    if not 0 < share < 1:
        return 1 if share <= 0 else 0
    return int(np.ceil(np.log((1 - LEVEL) / 2) / np.log(share)))


def _finite(values: Sequence[float]) -> np.ndarray:
    array = np.asarray([v for v in values if v is not None], dtype=float)
    return array[np.isfinite(array)]
