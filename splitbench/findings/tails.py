"""The tail-shift finding: per link, whether it widens the tail of the gaps between
tokens, or by at most how much (summary.tail_shift's rows and verdict)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from splitbench.findings.text import PERCENTILES, Finding
from splitbench.summary.tail_shift import (
    BASE_WIDER,
    BOUNDED,
    FEW_REQUESTS,
    JUDGED,
    MIN_REQUESTS,
    STALL_FACTOR,
    TAIL_BEYOND,
    TOO_FEW,
    WIDENS,
    verdict,
)


def finding(rows: pd.DataFrame, link: str, section: str) -> Finding | None:
    """Per link, from its single-stream cells (rows: this table's rows of one pair, model
    and link, shortest context first): whether it widens the tail of the gaps between
    tokens, or by at most how much, headlined at the first context it can be judged."""
    single = rows[rows["conc"] == 1]
    if single.empty:
        return None
    said = [(row, verdict(row)) for _, row in single.iterrows()]
    judged = [(row, how) for row, how in said if how in JUDGED]
    if not judged:
        reasons = "; ".join(f"at {row['ctx']} {_unjudged(row, how)}" for row, how in said)
        return Finding(section, f"Whether {link} widens the tail of the gaps between tokens "
                       "is not resolvable on this data", f": {reasons}.", (PERCENTILES,))
    head, how = judged[0]
    text = f" (against {_against(single)}). {_detail(head, how, link)}"
    rest = [f"at {row['ctx']} {_short(row, said_as)}" for row, said_as in said
            if row is not head]
    if rest:
        joined = "; ".join(rest)
        text += f" {joined[0].upper()}{joined[1:]}."
    return Finding(section, _headline(head, how, link), text.rstrip(), (PERCENTILES,))


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


def _pm(value: float, unc: float) -> str:
    return f"{value:+.2f}" + (f" ±{unc:.2f}" if np.isfinite(unc) else "")


def _moves(row: pd.Series) -> str:
    """The median's and the tail figure's moves (the p99's too where the tail is the
    p95)."""
    p50 = _pm(row["p50_delta_ms"], row["p50_delta_unc_ms"])
    tail = _pm(row["tail_delta_ms"], row["tail_delta_unc_ms"])
    text = f"its median gap between tokens moves {p50} ms and its {row['tail']} {tail} ms"
    if row["tail"] != "p99":
        text += f" (its p99 {_pm(row['p99_delta_ms'], row['p99_delta_unc_ms'])} ms)"
    return text


def _headline(row: pd.Series, how: str, link: str) -> str:
    """One form whatever the verdict, so that a rerun's headline differs only in its
    figure: the most the link widens the tail by (the upper end of the widening's
    one-sided interval, never below zero: a link cannot make the gaps steadier than no
    link). Whether it passes the run-wide allowance, the verdict, is the detail's."""
    bound = max(float(row["widening_bound_ms"]), 0.0)
    return (f"{link} widens the {row['tail']} of the gaps between tokens at {row['ctx']} "
            f"by at most {bound:.2f} ms")


def _allowance(row: pd.Series) -> str:
    count = int(row.get("comparisons", 1) or 1)
    among = f"; the run's {count} comparisons held together" if count > 1 else ""
    return f"the run-wide allowance of {row['widening_allowance_ms']:.2f} ms (one-sided{among})"


def _detail(row: pd.Series, how: str, link: str) -> str:
    """The headline's figures, the first gap apart and, where the baseline's tail was
    the wider, why that is no finding about the link."""
    widening = _pm(row["widening_ms"], row["widening_unc_ms"])
    if how == WIDENS:
        text = (f"{_capital(_moves(row))}; the widening, {widening} ms, is beyond "
                f"{_allowance(row)}: the link adds jitter.")
    else:
        text = (f"{_capital(_moves(row))}; the widening, {widening} ms, is within "
                f"{_allowance(row)}: no added jitter is resolved.")
    if how == BASE_WIDER:
        text += f" {_capital(_stall_note(row))}."
    return text + f" {_first_gap(row, link)}"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _stall_note(row: pd.Series) -> str:
    """Why a baseline's tail stood wider than the link's: its host, its stalls where it
    had more of them."""
    mine, theirs = int(row["stalls"]), int(row["stalls_base"])
    why = "host stalls, not the link" if theirs > mine else "the baseline's host, not the link"
    return (f"the baseline's own {row['tail']} stood further above its median: it held "
            f"{theirs} gaps over {STALL_FACTOR} x its median ({mine} on this link): {why}")


def _first_gap(row: pd.Series, link: str) -> str:
    return (f"The first gap after prefill, left out of these figures: "
            f"{row['first_gap_ms']:.2f} ms on {link}, "
            f"{_pm(row['first_gap_delta_ms'], row['first_gap_delta_unc_ms'])} ms against "
            "the baseline's.")


def _unjudged(row: pd.Series, how: str) -> str:
    if how == FEW_REQUESTS:
        return (f"{int(row['requests'])} requests on its side and "
                f"{int(row['requests_base'])} on the baseline's, fewer than the "
                f"{MIN_REQUESTS} a verdict needs on each")
    if how == TOO_FEW:
        fewest = int(min(row["gaps"], row["gaps_base"]))
        return (f"its steady gaps are too few for a tail ({fewest} on one side, "
                f"{TAIL_BEYOND * 20} needed for a p95)")
    if "widening_bound_ms" not in row:
        return "its table was made before the one-sided verdict (aggregate again)"
    return "the widening has no resamples to judge it by"


def _short(row: pd.Series, how: str) -> str:
    if how not in JUDGED:
        return f"not resolvable: {_unjudged(row, how)}"
    moves = f"the median {_pm(row['p50_delta_ms'], row['p50_delta_unc_ms'])} ms and the " \
        f"{row['tail']} {_pm(row['tail_delta_ms'], row['tail_delta_unc_ms'])} ms"
    if how == WIDENS:
        return (f"{moves} (adds jitter: {_pm(row['widening_ms'], row['widening_unc_ms'])} "
                f"ms more, beyond the allowance of {row['widening_allowance_ms']:.2f} ms)")
    if how == BOUNDED:
        return f"{moves} (widens the {row['tail']} by at most {row['widening_bound_ms']:.2f} ms)"
    return f"{moves} (does not widen it; {_stall_note(row)})"
