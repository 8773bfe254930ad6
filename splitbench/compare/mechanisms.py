"""Mechanisms: where a link's cost comes from. Decode's extra ms/token (less its
bandwidth term) against the links' request-response latency difference gives round trips
per token; prefill's relative change against relative one-way bandwidth gives its
elasticity. Fits through the origin, and a verdict per model that says what is resolvable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

import numpy as np
import pandas as pd

from splitbench.compare import traffic
from splitbench.compare.comparison import SWEEP
from splitbench.infra import intervals
from splitbench.infra.fits import fit_through_origin, slope_unc, unresolvable
from splitbench.summary.cell_summary import latency_by_pair, latency_column

# Prefill's elasticity to one-way bandwidth: within +-INSENSITIVE_BELOW prefill counts as
# insensitive to the link (the seed: +55% bandwidth bought +5..17% prefill, about 0.1 to
# 0.3); from TRACKS_ABOVE it tracks bandwidth.
INSENSITIVE_BELOW = 0.25
TRACKS_ABOVE = 0.75


def mechanism_points(comp: pd.DataFrame, links: pd.DataFrame) -> pd.DataFrame:
    """One point per non-baseline link, model and context (concurrency 1, both cells ok;
    `comp`: the run's comparison, comparison.run_comparison): decode delta, less its
    bandwidth term (traffic.bandwidth_delta), against the links' latency difference;
    prefill relative change against relative one-way bandwidth (A->B, the direction a
    prompt's activations travel)."""
    comp = comp[(comp["status"] == "ok") & (comp["status_base"] == "ok")]
    # Each pair's own latency figure: a pair is never fitted on another pair's choice.
    facts = latency_by_pair(links)[["pair", "link", "latency_us"]].merge(
        links.reindex(columns=["pair", "link", "a_to_b_gbps"]), on=["pair", "link"],
        how="left").rename(columns={"a_to_b_gbps": "gbps"})
    comp = comp.merge(facts, on=["pair", "link"], how="left").merge(
        facts.rename(columns={"link": "baseline"}), on=["pair", "baseline"], how="left",
        suffixes=("", "_base"))
    bandwidth = traffic.bandwidth_delta(comp, links)
    return comp.assign(
        latency_delta_ms=(comp["latency_us"] - comp["latency_us_base"]) / 1000,
        bandwidth_change=comp["gbps"] / comp["gbps_base"] - 1,
        prefill_change=comp["prefill_change_pct"] / 100,
        bandwidth_ms=bandwidth["bandwidth_ms"],
        bandwidth_unc_ms=bandwidth["bandwidth_unc_ms"],
        bandwidth_what=bandwidth["bandwidth_what"],
        # What the link's latency must explain: the delta less its bandwidth term
        # (all of it where that term is unknown: no bytes or throughput measured).
        decode_latency_ms=comp["decode_delta_ms"] - bandwidth["bandwidth_ms"].fillna(0),
    )


def _slopes_by(points: pd.DataFrame, key: str, x: str, y: str, order: Sequence[str]) -> str:
    fits = {k: fit_through_origin(g[x], g[y])["slope"] for k, g in points.groupby(key)}
    return " / ".join(f"{k} {fits[k]:.2f}" for k in order
                      if k in fits and np.isfinite(fits[k])) or "—"


def table(summary: pd.DataFrame, comp: pd.DataFrame, links: pd.DataFrame,
          contexts: list[str]) -> pd.DataFrame:
    """The seed's conclusions 1 and 2, computed per model: implied round trips per token
    (decode delta vs request-response latency difference) and prefill's elasticity to
    one-way bandwidth, each with its fit quality and a one-line verdict that the data
    must carry: a slope not resolvable from zero, of an impossible sign, or with a low
    R² gives "not resolvable on this data" with the reason, never a number. Where
    `comp` carries a prediction (comparison.run_comparison), a decode verdict whose fit
    has no number takes its latency term from the measured round trips."""
    points = mechanism_points(comp, links)
    rows = []
    for (pair, model), _ in summary.groupby(["pair", "model"]):
        mine = points[(points["pair"] == pair) & (points["model"] == model)]
        latency = latency_column(links[links["pair"] == pair] if "pair" in links else links)
        decode = mine.reindex(columns=["link", "ctx", "latency_delta_ms", "decode_delta_ms",
                                       "decode_latency_ms", "bandwidth_ms", "bandwidth_what",
                                       "predicted_latency_ms", "predicted_latency_unc_ms",
                                       "round_trips_from", "bandwidth_unc_ms",
                                       "decode_delta_unc_ms", "decode_lower_bound",
                                       "drift_decode_rel"]).dropna(
            subset=["latency_delta_ms", "decode_delta_ms"])
        prefill = mine[["link", "ctx", "bandwidth_change", "prefill_change", "gbps",
                        "gbps_base", "prefill_change_unc_pct", "prefill_lower_bound"]
                       ].dropna(subset=["bandwidth_change", "prefill_change", "gbps",
                                        "gbps_base"])
        prefill = prefill.assign(prefill_change_unc=prefill["prefill_change_unc_pct"] / 100)
        rows.append(_mechanism_row(pair, model, "decode",
                                   f"Δ {latency} (ms), after the bandwidth term", decode,
                                   "latency_delta_ms", "decode_latency_ms", contexts))
        rows.append(_mechanism_row(pair, model, "prefill", "relative A→B bandwidth",
                                   prefill, "bandwidth_change", "prefill_change", contexts))
    table = pd.DataFrame(rows)
    if summary["pair"].nunique() <= 1:
        table = table.drop(columns="pair")
    return table


class MechanismFit(TypedDict):
    """A fit through the origin (`fits.fit_through_origin`); is its ± a lower bound."""

    slope: float
    slope_se: float
    r2: float
    n: int
    lower_bound: bool


# A row of the mechanisms table (`_mechanism_row`), by column title.
MechanismRow = TypedDict("MechanismRow", {
    "pair": str,
    "model": str,
    "mechanism": str,
    "against": str,
    "slope": float,
    "±": float,
    "R²": float,
    "points": int,
    "links": int,
    "by link": str,
    "by context": str,
    "bandwidth term (ms/token)": str,
    "verdict": str,
})


def _mechanism_row(pair: str, model: str, mechanism: str, against: str, points: pd.DataFrame,
                   x: str, y: str, contexts: Sequence[str]) -> MechanismRow:
    unc = "decode_delta_unc_ms" if mechanism == "decode" else "prefill_change_unc"
    sigma = intervals.as_se(points[unc]) if unc in points else None
    fit = fit_through_origin(points[x], points[y], sigma)
    if sigma is not None and "drift_decode_rel" in points and np.isfinite(fit["slope"]):
        # The latencies were measured minutes before the cells; the machine's drift
        # moves them too: an uncertainty in x, carried into y through the slope (one
        # refit with the effective variance).
        sigma_x = pd.to_numeric(points["drift_decode_rel"]).fillna(0) * points[x].abs()
        fit = fit_through_origin(points[x], points[y], np.hypot(sigma, fit["slope"] * sigma_x))
    lower = f"{mechanism}_lower_bound"
    fit["lower_bound"] = bool(points[lower].fillna(True).astype(bool).any()) \
        if lower in points and len(points) else True
    by_context = _slopes_by(points, "ctx", x, y, contexts)
    verdict = (_decode_verdict(fit, points) + _dominant_terms(fit, points)
               if mechanism == "decode" else _prefill_verdict(fit, points))
    return {
        "pair": pair, "model": model, "mechanism": mechanism, "against": against,
        "slope": round(fit["slope"], 3),
        "±": round(slope_unc(fit), 3),
        "R²": round(fit["r2"], 2),
        "points": fit["n"],
        "links": points["link"].nunique(),
        "by link": _slopes_by(points, "link", x, y, sorted(points["link"].unique())),
        "by context": by_context,
        "bandwidth term (ms/token)": _bandwidth_by_link(points) if mechanism == "decode"
        else "—",
        "verdict": verdict,
    }


def _bandwidth_by_link(points: pd.DataFrame) -> str:
    """Each link's bandwidth term (median over contexts), "usb4 +1.02 / 5gbe +1.05"."""
    if points.empty or points["bandwidth_ms"].isna().all():
        return "— (no bytes or throughput measured)"
    return " / ".join(f"{link} {group['bandwidth_ms'].median():+.2f}"
                      for link, group in points.groupby("link"))


def _dominant_terms(fit: MechanismFit, points: pd.DataFrame) -> str:
    """Per link: the decode delta's bandwidth term (predicted from the token's bytes and
    the links' throughput) and its latency term (the round trips the sweep measured x
    the latency difference; without a sweep, the cells' fitted round trips where the
    fit has a number), each with its ±, and the term that dominates: only where the two
    differ by more than their combined ±. The sweep comes first: it measures round trips
    on their own, where the cells' fit inherits every cell's noise."""
    if points.empty:
        return ""
    if points["bandwidth_ms"].isna().all():
        return ("; the bandwidth term is unknown (no bytes per token or throughput "
                "measured): the fit counts all of the delta as latency")
    resolvable = np.isfinite(fit["slope"]) and fit["slope"] > 0 and not _unresolvable(
        fit, "latency")
    parts = []
    for link, group in points.groupby("link"):
        measured, unc = _weighted(group["decode_delta_ms"], group["decode_delta_unc_ms"])
        bandwidth = group["bandwidth_ms"].median()
        bandwidth_unc = group["bandwidth_unc_ms"].median()
        gap = group["latency_delta_ms"].median()
        swept = group["predicted_latency_ms"].median() if "predicted_latency_ms" in group \
            else np.nan
        if np.isfinite(swept):
            latency, latency_unc = swept, group["predicted_latency_unc_ms"].median()
            source = (group["round_trips_from"].dropna().iloc[0] if "round_trips_from" in
                      group and group["round_trips_from"].notna().any() else SWEEP)
            how = ("the sweep's round trips × the latency difference" if source == SWEEP
                   else f"round trips {source} × the latency difference")
        elif resolvable:
            latency, latency_unc = fit["slope"] * gap, slope_unc(fit) * abs(gap)
            how = f"{fit['slope']:.1f} round trips × {gap:.2f} ms"
        else:
            latency, latency_unc, how = np.nan, np.nan, ""
        if not np.isfinite(bandwidth):
            continue
        what = group["bandwidth_what"].dropna()
        carried = f" ({what.iloc[0]})" if len(what) and bandwidth > 0 else ""
        figure = f"{measured:+.2f}" + (f" ±{unc:.2f}" if np.isfinite(unc) else "")
        if np.isfinite(unc) and abs(measured) <= unc:
            figure += " (not resolvable)"
        text = (f"{link}: {figure} ms/token measured, predicted bandwidth {bandwidth:+.2f}"
                f"{_plus_minus(bandwidth_unc)}{carried}")
        if np.isfinite(latency):
            text += f" + latency {latency:+.2f}{_plus_minus(latency_unc)} ({how}): "
            text += dominance(bandwidth, bandwidth_unc, latency, latency_unc)
        else:
            text += ", latency term unknown (no round trips resolved or measured)"
        parts.append(text)
    return ("; per link: " + "; ".join(parts)) if parts else ""


def _plus_minus(unc: float) -> str:
    return f" ±{unc:.2f}" if np.isfinite(unc) else ""


def dominance(bandwidth: float, bandwidth_unc: float, latency: float,
               latency_unc: float) -> str:
    """Which term is larger beyond their combined uncertainty (unknown ± counts as 0)."""
    allowed = float(np.hypot(np.nan_to_num(bandwidth_unc), np.nan_to_num(latency_unc)))
    if abs(bandwidth) - abs(latency) > allowed:
        return "bandwidth dominates"
    if abs(latency) - abs(bandwidth) > allowed:
        return "latency dominates"
    return f"neither dominates (they differ by less than ±{allowed:.2f})"


def _weighted(values: pd.Series, unc: pd.Series) -> tuple[float, float]:
    """The inverse-variance mean of a link's deltas over contexts and its uncertainty
    (their median and no uncertainty where one is missing)."""
    values, unc = values.to_numpy(dtype=float), unc.to_numpy(dtype=float)
    if len(values) and np.all(np.isfinite(unc)) and np.all(unc > 0):
        weights = 1 / unc**2
        return float(np.sum(weights * values) / np.sum(weights)), float(
            1 / np.sqrt(np.sum(weights)))
    return (float(np.median(values)) if len(values) else np.nan), np.nan


def _unresolvable(fit: MechanismFit, what: str) -> list[str]:
    """Why a fit cannot carry a verdict: not resolvable from zero, or a low R²."""
    return unresolvable(fit["slope"], slope_unc(fit), fit["r2"], what)


def _decode_verdict(fit: MechanismFit, points: pd.DataFrame) -> str:
    if not np.isfinite(fit["slope"]):
        return ("no ok cell pairs on links with a request-response latency difference: "
                "nothing to fit")
    if _varies_with_context(points) and not fit["lower_bound"]:
        # No single number: the per-token cost grows (or shrinks) with context (judged
        # only against uncertainties that include run-to-run variation).
        per = []
        for ctx, group in points.groupby("ctx", sort=False):
            f = fit_through_origin(group["latency_delta_ms"], group["decode_latency_ms"],
                                   intervals.as_se(group["decode_delta_unc_ms"]))
            per.append(f"{ctx} {f['slope']:.1f}" + (f" ±{slope_unc(f):.1f}"
                                                    if np.isfinite(f["slope_se"]) else ""))
        return ("no single number of round trips: the cost per token changes with context "
                f"({', '.join(per)} round trips' worth of latency; a term that grows with "
                "context, such as bandwidth, adds to latency)")
    slope, unc = fit["slope"], slope_unc(fit)
    reasons = _unresolvable(fit, "latency")
    if slope < 0 and np.isfinite(unc) and abs(slope) > unc:
        reasons.insert(0, f"the slope is {slope:+.2f} ±{unc:.2f}: negative round trips "
                          "are impossible (noise or a fault in the setup)")
    if reasons:
        return "not resolvable on this data: " + "; ".join(reasons)
    text = f"decode pays ~{slope:.1f} ±{unc:.1f} round trips of link latency per token"
    if np.isfinite(fit["r2"]):
        text += f" (R² {fit['r2']:.2f}, {fit['n']} points)"
    if fit["lower_bound"]:
        text += "; ± from per-cell spreads alone, a lower bound"
    varies = _varies_with_context(points)
    if varies is False:
        # The seed's fixed-cost signature: the delta does not grow with context even
        # though per-token time does. Not resolving a change is no proof of none: the
        # link's finding gives the bound (cost_findings._constancy).
        text += "; no change with context resolved (a fixed per-token cost fits)"
    elif varies:  # with lower-bound uncertainties only: a hint, not a finding
        text += "; it may change with context (the ± are lower bounds)"
    return text


def _varies_with_context(points: pd.DataFrame) -> bool | None:
    """Whether two contexts' round-trip slopes differ by more than their measured
    uncertainty (propagated from the deltas' own uncertainty, not from the scatter, which
    is what is being judged); without uncertainty, by more than a quarter. None with
    fewer than two contexts."""
    slopes = []
    for _, group in points.groupby("ctx"):
        x = group["latency_delta_ms"].to_numpy()
        sxx = float(np.sum(x * x))
        if sxx == 0:
            continue
        sigma = intervals.as_se(group["decode_delta_unc_ms"].to_numpy(dtype=float))
        se = np.sqrt(np.sum((x * sigma) ** 2)) / sxx  # NaN where a delta has no uncertainty
        slopes.append((float(np.sum(x * group["decode_latency_ms"].to_numpy()) / sxx), se))
    if len(slopes) < 2:
        return None
    normal = intervals.t_factor(intervals.UNBOUNDED)
    return any(abs(a - b) > normal * np.hypot(sa, sb) if np.isfinite(np.hypot(sa, sb))
               else abs(a - b) > 0.25 * max(abs(a), abs(b))
               for i, (a, sa) in enumerate(slopes) for b, sb in slopes[i + 1:])


def _prefill_verdict(fit: MechanismFit, points: pd.DataFrame) -> str:
    if not np.isfinite(fit["slope"]):
        return "no ok cell pairs on links of different bandwidth: nothing to fit"
    elasticity, unc = fit["slope"], slope_unc(fit)
    floor = min(points["gbps"].min(), points["gbps_base"].min())
    biggest = points.loc[points["bandwidth_change"].abs().idxmax()]
    gains = points[points["link"] == biggest["link"]]["prefill_change"] * 100
    example = (f"{biggest['bandwidth_change'] * 100:+.0f}% bandwidth ({biggest['link']}): "
               f"{gains.min():+.0f}% to {gains.max():+.0f}% prefill")
    figure = f"elasticity {elasticity:.2f}" + (f" ±{unc:.2f}" if np.isfinite(unc) else "")
    # Insensitive: the whole interval lies inside +-INSENSITIVE_BELOW (a low R² is
    # expected there: there is no trend to explain).
    if np.isfinite(unc) and abs(elasticity) + unc < INSENSITIVE_BELOW:
        bound = "; ± from per-cell spreads alone, a lower bound" if fit["lower_bound"] else ""
        return (f"prefill insensitive to bandwidth above {floor:.2f} Gbit/s ({figure}; "
                f"{example}){bound}")
    reasons = _unresolvable(fit, "bandwidth")
    if elasticity < 0 and np.isfinite(unc) and abs(elasticity) > unc:
        reasons.insert(0, f"prefill falls as bandwidth rises ({figure}): other differences "
                          "between the links dominate")
    if reasons:
        return f"not resolvable on this data: {'; '.join(reasons)} ({example})"
    head = ("prefill partly bandwidth-bound" if elasticity < TRACKS_ABOVE
            else "prefill tracks one-way bandwidth")
    text = f"{head} ({figure}; {example})"
    if fit["lower_bound"]:
        text += "; ± from per-cell spreads alone, a lower bound"
    return text
