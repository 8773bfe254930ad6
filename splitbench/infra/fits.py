"""Line fits every stage uses: a fit through the origin (a cost against the baseline)
and Theil-Sen (robust, for a few points). A fit's ± is infra/intervals.py's: Student's
t at its degrees of freedom (points less one) times the slope's standard error."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from splitbench.infra import intervals


def fit_through_origin(x: Sequence[float], y: Sequence[float],
                       sigma: Sequence[float] | None = None) -> dict[str, float]:
    """y = slope * x (identical links cost nothing extra): slope, its standard error, R²
    (share of y's variance the line explains; NaN with fewer than two distinct x) and n.

    With `sigma` (each y's standard error) known for every point, the fit is weighted
    and the standard error is the larger of the propagated one and the scatter's (a
    fit cannot be more precise than its points, nor than their scatter shows)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    s = np.full(len(x), np.nan) if sigma is None else np.asarray(sigma, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y, s = x[keep], y[keep], s[keep]
    n, sxx = len(x), float(np.sum(x * x))
    if n == 0 or sxx == 0:
        return {"slope": np.nan, "slope_se": np.nan, "r2": np.nan, "n": n}
    weighted = bool(np.all(np.isfinite(s)) and np.all(s > 0))
    w = 1 / s**2 if weighted else np.ones(n)
    swxx = float(np.sum(w * x * x))
    slope = float(np.sum(w * x * y) / swxx)
    residual = y - slope * x
    # R² in the fit's own weights: a point the fit trusts little counts little here too.
    mean = float(np.sum(w * y) / np.sum(w))
    ss_res = float(np.sum(w * residual**2))
    ss_tot = float(np.sum(w * (y - mean) ** 2))
    scatter = float(np.sqrt(ss_res / (n - 1) / swxx)) if n > 1 else np.nan
    se = max(scatter, float(np.sqrt(1 / swxx))) if weighted else scatter
    r2 = 1 - ss_res / ss_tot if len(np.unique(x)) > 1 and ss_tot > 0 else np.nan
    return {"slope": slope, "slope_se": se, "r2": r2, "n": n}


def slope_unc(fit: Mapping[str, Any]) -> float:
    """The ± of a fitted slope: t at the fit's points less one times its standard error
    (one weighted point: the normal quantile of its propagated error; none: NaN)."""
    n = fit.get("n", 0)
    if n >= 2:
        return intervals.halfwidth(fit["slope_se"], n - 1)
    # One weighted point: its standard error is the point's own, propagated.
    return intervals.halfwidth(fit["slope_se"], intervals.UNBOUNDED) if n == 1 else np.nan


def unresolvable(slope: float, unc: float, r2: float | None, what: str) -> list[str]:
    """Why a fitted slope cannot carry a verdict: not resolvable from zero (`unc`: its
    uncertainty, already at the coverage the tables print), or a low R². Empty where
    it can."""
    reasons = []
    if unc is None or not np.isfinite(unc):
        # No parentheses: the findings quote a reason up to its first one.
        reasons.append(f"one point only: its slope {slope:.2f} has no uncertainty")
    elif abs(slope) <= unc:
        reasons.append(f"{slope:+.2f} ±{unc:.2f} is not resolvable from zero")
    if r2 is not None and np.isfinite(r2) and r2 < 0.5:
        reasons.append(f"{what} explains the differences poorly (R² {r2:.2f})")
    return reasons


def theil_sen(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float]:
    """Robust line fit: median of pairwise slopes, median intercept; returns (a, b, r2)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    i, j = np.triu_indices(len(x), k=1)
    dx = x[j] - x[i]
    keep = dx != 0
    slope = float(np.median((y[j] - y[i])[keep] / dx[keep]))
    intercept = float(np.median(y - slope * x))
    residual = y - (intercept + slope * x)
    total = np.sum((y - y.mean()) ** 2)
    r2 = float(1 - np.sum(residual**2) / total) if total > 0 else 1.0
    return intercept, slope, r2
