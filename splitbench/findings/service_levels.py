"""The service-level finding: per context, each link's most concurrent streams that
hold the configured level (summary.service_levels' rows and verdicts)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from splitbench.findings.text import SERVICE_LEVELS, Finding, listed
from splitbench.summary.service_levels import FAILS, HOLDS


def level_text(slo: dict[str, Any]) -> str:
    """"within 1000 ms to first token and 200 tokens/s per stream for 90% of requests"."""
    parts = []
    if slo.get("ttft_ms") is not None:
        parts.append(f"{slo['ttft_ms']:g} ms to first token")
    if slo.get("tokens_per_s") is not None:
        parts.append(f"{slo['tokens_per_s']:g} tokens/s per stream")
    return f"within {' and '.join(parts)} for {slo.get('share_pct', 90.0):g}% of requests"


def held_streams(cells: pd.DataFrame) -> tuple[str, str | None]:
    """One link's cells at one context, by concurrency (this module's rows): the most
    streams up to which every level holds, resolved by its interval, and what the next
    level showed (how it ended, that it fails, or that it is not resolvable at this
    sample size); then the evidence for that next level, its counts and interval (None
    where every level holds or the next ended early). The verdict is the headline, the
    evidence its detail: a count that moves by one between runs moves the detail only."""
    cells = cells.sort_values("conc")
    held = 0
    for row in cells.itertuples():
        if row.verdict != HOLDS:
            break
        held = row.conc
    if held == cells["conc"].iloc[-1]:
        return f"holds all {held} measured stream{'s' if held > 1 else ''}", None
    nxt = cells[cells["conc"] > held].iloc[0]
    said = f"holds {_streams(held)}" if held else "holds none"
    if isinstance(nxt["status"], str) and nxt["status"] != "ok":
        return f"{said} (at {_streams(nxt['conc'])} it ended {nxt['status']})", None
    at = f"at {_streams(nxt['conc'])}: {evidence(nxt)}"
    if nxt["verdict"] == FAILS:
        verb = "fails" if nxt["conc"] == 1 else "fail"
        return f"{said}; {_streams(nxt['conc'])} {verb}", at
    needed = nxt["requests_needed"]
    more = ("no number of requests at this share would resolve it" if pd.isna(needed)
            else f"about {int(needed)} requests would resolve it")
    if not held:  # not "holds none": nothing is known to fail
        return f"is not resolvable at {_streams(nxt['conc'])}", f"{at}; {more}"
    return f"{said}; {_streams(nxt['conc'])} not resolvable", f"{at}; {more}"


def evidence(cell: pd.Series | dict) -> str:
    """"9 of 10 met, 95% interval 55–100%", or where the cell was judged by its releases
    "5 of 6 requests met; as 2 of 3 releases, 95% interval 9–100%"; the interval
    rounded outwards, so that it reads as it was judged."""
    span = (f"95% interval {math.floor(cell['met_low_pct'] + 1e-9):.0f}–"
            f"{math.ceil(cell['met_high_pct'] - 1e-9):.0f}%")
    if cell.get("sample_unit") == "releases":
        releases = int(cell["releases"])
        return (f"{cell['met']} of {cell['requests']} requests met; as "
                f"{cell['met'] * releases // cell['requests']} of {releases} releases, "
                f"{span}")
    return f"{cell['met']} of {cell['requests']} met, {span}"


def _streams(count: int) -> str:
    return f"{count} stream{'s' if count != 1 else ''}"


def findings(levels: pd.DataFrame, contexts: Sequence[str], slo: dict[str, Any],
             section: str, baseline: str | None) -> list[tuple[str, Finding]]:
    """A sentence per context, with its context: each link's most concurrent streams
    that hold the level, resolved by each cell's interval (levels: this module's rows of
    one pair and model)."""
    out = []
    for ctx in [c for c in contexts if c in set(levels["ctx"])]:
        here = levels[levels["ctx"] == ctx]
        links = sorted(here["link"].unique(), key=lambda link: (link != baseline, link))
        held = {link: held_streams(here[here["link"] == link]) for link in links}
        said = [f"{link} {verdict}" for link, (verdict, _) in held.items()]
        shown = [f"{link} {detail}" for link, (_, detail) in held.items() if detail]
        why = f" Each first level not held, {'; '.join(shown)}." if shown else ""
        out.append((ctx, Finding(section, f"At {ctx}, {level_text(slo)}: {listed(said)}",
                                 f".{why}", (SERVICE_LEVELS,))))
    return out
