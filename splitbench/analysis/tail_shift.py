"""What a link does to the tail of the token times: does it shift every gap between two
tokens alike (a fixed cost per step), or widen the distribution (jitter)?

Per cell of a link other than the baseline: the change of the inter-token latency's p50
and p99 against the baseline's (a paired cell's own reference requests, measured in the
same rounds; else the baseline link's cell of the same model, context and concurrency),
and their difference, the widening: how much more the p99 moved than the median. Each ±
comes from independent bootstraps of the two sides' requests (percentiles.bootstrap):
COVERAGE standard deviations of the difference over the draws. A side with fewer than
TAIL_MIN_SAMPLES gaps has no tail to compare (`too_few`).

A run judges the widening of every link at every context at once (a default run: three
links, three contexts), and at COVERAGE standard deviations one comparison in twenty
crosses its ± by chance alone: over nine, a third of quiet runs would report jitter
somewhere. So a verdict needs the widening beyond `widening_allowance_ms`, the ± widened
to hold all the run's single-stream comparisons together at COVERAGE's confidence
(Šidák: each at 1 - (1 - confidence)^(1/m)).
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import NormalDist

import numpy as np
import pandas as pd

from splitbench import results
from splitbench.analysis import percentiles
from splitbench.analysis.finding_text import Finding
from splitbench.infra.fits import COVERAGE

COLUMNS = [*results.CELL_KEYS, "baseline", "paired", "gaps", "gaps_base", "too_few",
           "p50_ms", "p99_ms", "p50_delta_ms", "p50_delta_unc_ms", "p99_delta_ms",
           "p99_delta_unc_ms", "widening_ms", "widening_unc_ms", "comparisons",
           "widening_allowance_ms"]


def table(request_files: Sequence[str], baseline: str | None) -> pd.DataFrame:
    """One row per cell of a link other than `baseline` (COLUMNS)."""
    return with_allowance(shifts(request_files, baseline))


def shifts(request_files: Sequence[str], baseline: str | None) -> pd.DataFrame:
    """table's rows before the run's joint allowance: each one depends on its own cell
    and the baseline link's cell of the same keys alone (among `request_files`). The
    baseline link's files give no row of their own."""
    cells: dict[tuple, str] = {}
    for path in request_files:
        key = _key(path)
        if key is not None:
            cells.setdefault(key, path)
    rows = []
    # A baseline cell is the reference of every other link's cell of its keys: its gaps
    # and their resamples are made once.
    bases: dict[str, tuple[list[np.ndarray], np.ndarray | None]] = {}
    for key, path in cells.items():
        pair, link, model, ctx, conc = key
        if baseline is None or link == baseline:
            continue
        requests = percentiles.requests_of(path)
        own = _gaps(path, requests, reference=False)
        base = _gaps(path, requests, reference=True)
        paired = bool(base)
        draws_base = None
        if not paired and (pair, baseline, model, ctx, conc) in cells:
            other = cells[(pair, baseline, model, ctx, conc)]
            if other not in bases:
                gaps = _gaps(other, percentiles.requests_of(other), reference=False)
                bases[other] = (gaps, percentiles.bootstrap(gaps, 2) if gaps else None)
            base, draws_base = bases[other]
        if not own or not base:
            continue
        rows.append({"pair": pair, "link": link, "model": model, "ctx": ctx, "conc": conc,
                     "baseline": baseline, "paired": paired,
                     **shift(own, base, draws_base)})
    return pd.DataFrame(rows, columns=COLUMNS[:-2])


def with_allowance(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` with `comparisons` (the single-stream cells whose widening is judged) and
    each widening's ± widened to hold them all together (`widening_allowance_ms`)."""
    judged = (rows["conc"] == 1) & ~rows["too_few"].astype(bool) & np.isfinite(
        pd.to_numeric(rows["widening_unc_ms"], errors="coerce"))
    count = max(int(judged.sum()), 1)
    out = rows.copy()
    out["comparisons"] = count
    out["widening_allowance_ms"] = (pd.to_numeric(rows["widening_unc_ms"], errors="coerce")
                                    * joint_sigmas(count) / COVERAGE)
    return out


def joint_sigmas(count: int) -> float:
    """Standard deviations that hold `count` independent comparisons together at the
    confidence COVERAGE standard deviations give one (COVERAGE itself for one)."""
    normal = NormalDist()
    confidence = 2 * normal.cdf(COVERAGE) - 1
    each = confidence ** (1 / count)
    return normal.inv_cdf(0.5 + each / 2)


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


def shift(own: list[np.ndarray], base: list[np.ndarray],
          draws_base: np.ndarray | None = None) -> dict[str, float | int | bool]:
    """The p50's and p99's change from `base` to `own` and the widening, with ±
    (`draws_base`: base's resamples where already made, `percentiles.bootstrap(base, 2)`)."""
    values, values_base = np.concatenate(own), np.concatenate(base)
    p50, p99 = np.percentile(values, [50, 99])
    b50, b99 = np.percentile(values_base, [50, 99])
    draws = percentiles.bootstrap(own, 1)
    if draws_base is None:
        draws_base = percentiles.bootstrap(base, 2)
    out = {"gaps": int(values.size), "gaps_base": int(values_base.size),
           "too_few": bool(min(values.size, values_base.size) < percentiles.TAIL_MIN_SAMPLES),
           "p50_ms": float(p50), "p99_ms": float(p99),
           "p50_delta_ms": float(p50 - b50), "p99_delta_ms": float(p99 - b99),
           "widening_ms": float((p99 - p50) - (b99 - b50))}
    if draws is None or draws_base is None:
        return {**out, "p50_delta_unc_ms": np.nan, "p99_delta_unc_ms": np.nan,
                "widening_unc_ms": np.nan}
    delta = draws - draws_base
    return {**out,
            "p50_delta_unc_ms": float(COVERAGE * np.std(delta[:, 0], ddof=1)),
            "p99_delta_unc_ms": float(COVERAGE * np.std(delta[:, 1], ddof=1)),
            "widening_unc_ms": float(COVERAGE * np.std(delta[:, 1] - delta[:, 0], ddof=1))}


# --- the finding ---------------------------------------------------------------------------
def finding(rows: pd.DataFrame, link: str, section: str) -> Finding | None:
    """Per link, from its single-stream cells (rows: this table's rows of one pair, model
    and link, shortest context first): whether it shifts the token times or widens
    them, headlined at the first context with enough gaps for a p99."""
    single = rows[rows["conc"] == 1]
    if single.empty:
        return None
    said = [(row, _verdict(row)) for _, row in single.iterrows()]
    resolvable = [(row, verdict) for row, verdict in said if verdict != "too few"]
    against = _against(single)
    if not resolvable:
        fewest = int(single[["gaps", "gaps_base"]].min(axis=1).max())
        return Finding(section, (
            f"**Whether {link} widens the tail of token times is not resolvable on this "
            f"data**: its single-stream cells hold at most {fewest} gaps between tokens "
            f"on one side, fewer than the {percentiles.TAIL_MIN_SAMPLES} a p99 needs."),
            (PERCENTILES_REF,))
    head, verdict = resolvable[0]
    text = f"**{_headline(head, verdict, link)}** (against {against}). "
    rest = [f"at {row['ctx']} {_short(row, verdict)}" for row, verdict in said
            if row is not head]
    if rest:
        joined = "; ".join(rest)
        text += f"{joined[0].upper()}{joined[1:]}."
    return Finding(section, text.strip(), (PERCENTILES_REF,))


PERCENTILES_REF = "[percentiles](#table-percentiles)"


def _against(single: pd.DataFrame) -> str:
    """What the link's gaps were held to: its paired cells' own baseline requests, the
    baseline link's cells, or each where it was."""
    paired = single["paired"].astype(bool)
    if paired.all():
        return "its paired baseline requests"
    if not paired.any():
        return "the baseline link's cells"
    return (f"its paired baseline requests at {', '.join(single.loc[paired, 'ctx'])}, the "
            "baseline link's cells elsewhere")


def _verdict(row: pd.Series) -> str:
    if row["too_few"]:
        return "too few"
    widening = row["widening_ms"]
    unc = row.get("widening_allowance_ms", row["widening_unc_ms"])  # older tables: plain ±
    if not np.isfinite(unc):
        return "unknown"
    return "widens" if widening > unc else "narrows" if widening < -unc else "shifts"


def _pm(value: float, unc: float) -> str:
    return f"{value:+.2f}" + (f" ±{unc:.2f}" if np.isfinite(unc) else "")


def _headline(row: pd.Series, verdict: str, link: str) -> str:
    p50 = _pm(row["p50_delta_ms"], row["p50_delta_unc_ms"])
    p99 = _pm(row["p99_delta_ms"], row["p99_delta_unc_ms"])
    more = _pm(row["widening_ms"], row.get("widening_allowance_ms", row["widening_unc_ms"]))
    at = row["ctx"]
    if verdict == "widens":
        return (f"{link} adds jitter at {at}: its median gap between tokens moves {p50} ms "
                f"and its p99 {p99} ms, {more} ms more")
    if verdict == "narrows":
        return (f"{link} narrows the tail at {at}: its median gap between tokens moves "
                f"{p50} ms and its p99 {p99} ms, {more} ms less")
    if verdict == "shifts":
        return (f"{link} shifts every gap between tokens alike at {at}: its median moves "
                f"{p50} ms and its p99 {p99} ms, no added jitter (the difference, {more} "
                f"ms, is within its ±{_joint(row)})")
    return f"{link} moves its median gap between tokens {p50} ms and its p99 {p99} ms at {at}"


def _joint(row: pd.Series) -> str:
    count = int(row.get("comparisons", 1) or 1)
    return f", which holds the run's {count} such comparisons together" if count > 1 else ""


def _short(row: pd.Series, verdict: str) -> str:
    if verdict == "too few":
        return (f"its p99 rests on too few gaps ({int(min(row['gaps'], row['gaps_base']))})")
    p50 = _pm(row["p50_delta_ms"], row["p50_delta_unc_ms"])
    p99 = _pm(row["p99_delta_ms"], row["p99_delta_unc_ms"])
    how = {"widens": "adds jitter", "narrows": "narrows the tail",
           "shifts": "no added jitter"}.get(verdict, "the widening's ± unknown")
    return f"the median {p50} ms and the p99 {p99} ms ({how})"
