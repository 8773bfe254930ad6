"""What every finding shares: the `Finding` itself, numbers as text, the tables it
points to, and the ⚠ a finding drawn from flagged cells carries."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from splitbench.contracts import anchors
from splitbench.contracts.marks import FLAG_MARK

# A cost is "mostly fixed per step" when at least this share of it at the longest
# resolved context is already there at the shortest (a term that grows with context, the
# attention mask or the bandwidth of a growing hidden state, starts near zero).
FIXED_SHARE = 0.5
# Concurrency "collapses" where overlap falls from at least HIGH at the shortest context
# to at most LOW at the longest, on every link.
OVERLAP_HIGH, OVERLAP_LOW = 0.5, 0.2
# Rates within this share count as "on par" when two links are set side by side.
ON_PAR = 0.10

FAILED_MARK = "✗"


@dataclass(frozen=True)
class Ref:
    """A table or chart a finding rests on: its name and its section on the page."""
    label: str
    anchor: str

    def markdown(self) -> str:
        return f"[{self.label}](#{self.anchor})"


COMPARISON = Ref("link comparison", anchors.table("link_comparison"))
MECHANISMS = Ref("mechanisms", anchors.table("mechanisms"))
ROUND_TRIPS = Ref("round trips", anchors.table("round_trips"))
SENSITIVITY = Ref("what-if chart", anchors.chart("decode_sensitivity"))
PREFILL = Ref("prefill", anchors.table("single_stream_prefill"))
BOUNDARY = Ref("concurrency boundary", anchors.table("concurrency_boundary"))
OVERLAP = Ref("overlap", anchors.table("overlap"))
LINKS = Ref("links", anchors.table("links"))
DECODE_CHART = Ref("decode Δ chart", anchors.chart("decode_delta"))
PERCENTILES = Ref("percentiles", anchors.table("percentiles"))
BACKENDS = Ref("backends", anchors.table("backends"))
SERVICE_LEVELS = Ref("service levels", anchors.table("service_levels"))
CHECKS = Ref("checks", anchors.CHECKS)


@dataclass
class Finding:
    """One finding under the heading `section`: its headline (the bold opening a run's
    last lines print, `checks`; "" where it has none), the sentences after it, which
    begin with their own punctuation, and the tables and charts it rests on. `flagged`:
    it rests on figures marked ⚠ (or is a flagged check); `failed`: it says what did
    not work (✗). findings.json holds these fields; findings.md is `markdown()`."""
    section: str
    headline: str
    text: str = ""
    refs: Sequence[Ref] = field(default_factory=tuple)
    flagged: bool = False
    failed: bool = False

    def mark(self) -> str:
        """✗ or ⚠ and a space where the finding carries one, else nothing."""
        return (f"{FAILED_MARK} " if self.failed else
                f"{FLAG_MARK} " if self.flagged else "")

    def markdown(self) -> str:
        """The finding as one Markdown line's body: the headline in bold, its mark first."""
        if self.headline:
            return f"**{self.mark()}{self.headline}**{self.text}"
        return f"{self.mark()}{self.text}"

    def record(self) -> dict[str, Any]:
        """The finding as findings.json holds it."""
        return {"section": self.section, "headline": self.headline, "text": self.text,
                "flagged": self.flagged, "failed": self.failed,
                "refs": [{"label": r.label, "anchor": r.anchor} for r in self.refs],
                "markdown": self.markdown()}


# --- numbers as text ------------------------------------------------------------------
def fixed(value: float, places: int = 2) -> str:
    """`value` to `places` decimals, with no sign on one that rounds to zero ("0.00",
    not "-0.00")."""
    return f"{round(value, places) + 0.0:.{places}f}"


def ms_text(value: float) -> str:
    return f"{value:+.1f}" if abs(value) >= 10 else f"{value:+.2f}"


def pm_text(value: float, unc: float, fmt: str = "ms") -> str:
    """"+0.70 ±0.06" (ms), "+17 ±4%" (pct); the ± left out where unknown."""
    if fmt == "pct":
        return f"{value:+.0f}%" + (f" ±{unc:.0f}%" if np.isfinite(unc) else "")
    text = ms_text(value)
    if np.isfinite(unc):
        text += f" ±{abs(float(ms_text(unc))):.{1 if abs(value) >= 10 else 2}f}"
    return text


def as_number(value: Any) -> float:
    number = pd.to_numeric(value, errors="coerce")
    return float(number) if number is not None and np.isfinite(number) else np.nan


def listed(parts: Sequence[str]) -> str:
    parts = list(parts)
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def flags_of(rows: pd.DataFrame, columns: Sequence[str] = ("flags", "flags_base")
              ) -> list[tuple[str, str]]:
    """(where, why) for each row whose flags are set in any of `columns`: the cells (or
    links) a finding drawn from `rows` rests on that carry ⚠ in their table."""
    out = []
    for _, r in rows.iterrows():
        why = [str(r[c]) for c in columns if c in rows and isinstance(r[c], str) and r[c]]
        if why:
            where = " ".join(str(r[c]) for c in ("link", "ctx") if c in rows)
            if "conc" in rows and r["conc"] > 1:
                where += f" {r['conc']}-way"
            out.append((where, why[0].split("; ")[0]))
    return out


# Beyond this many, the flagged cells are counted rather than named: a sentence that
# names thirty cells is read as a list, not as a flag.
NAMED_MAX = 4


def marked(found: Finding | None, flagged: Sequence[tuple[str, str]], what: str = "cells",
           among: int | None = None) -> Finding | None:
    """`found` flagged (its headline printed after ⚠) and a sentence naming the flagged
    `what` it was drawn from (`among`: how many it was drawn from, to count them when
    there are many), so that its headline, printed alone at the end of the run, carries
    the flag too. Unchanged where nothing it rests on is flagged."""
    if found is None or not flagged:
        return found
    found.flagged = True
    text = found.text
    places = list(dict.fromkeys(w for w, _ in flagged))
    if len(places) <= NAMED_MAX:
        where = f"flagged {what}, {listed(places)}"
    elif among is not None and len(places) >= among:
        where = f"{among} {what}, all flagged"
    elif among is not None:
        where = f"{len(places)} flagged {what} of its {among}"
    else:
        where = f"{len(places)} flagged {what}"
    text += (f" {FLAG_MARK} It rests on {where} (the first: {flagged[0][1]}): the machine "
             "may be in these figures as well as the link.")
    found.text = text
    return found
