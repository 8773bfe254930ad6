"""config/reruns.yaml: each cell's re-run epoch, bumped by `drift --apply` for the
suspect cells. The workflow puts a cell's epoch in its params (`plan.epochs` reads them),
so the next run re-measures exactly those cells."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TypedDict

import pandas as pd
import yaml

from splitbench.infra import files
from splitbench.matrix.plan import cell_key, read_reruns
from splitbench.summary.cell_summary import SUMMARY_KEYS as KEYS

HEADER = """\
# Re-run epochs, written by `python -m splitbench drift --apply` (or by hand).
# Each job's params carry its cell's epoch (`cells`, default 0): raising a cell's epoch
# makes the next `snakemake all` re-measure exactly that cell, and the superseded files
# are archived first. Keys are <pair>/<link>/<model>/ctx<ctx>_c<conc>. The comment beside
# each entry and `history` say when and why; comments are rewritten on each --apply.
"""


def apply(suspects: pd.DataFrame, reruns_path: str | Path) -> dict[str, int]:
    """Bump the epoch of each suspect cell once; keep every other entry. Returns the new
    epochs of the bumped cells."""
    return _bump(suspects, reruns_path, dt.datetime.now(dt.UTC))


def _bump(suspects: pd.DataFrame, reruns_path: str | Path,
          now: dt.datetime) -> dict[str, int]:
    data = read_reruns(reruns_path)
    cells = {str(k): int(v) for k, v in (data.get("cells") or {}).items()}
    history = {str(k): list(v) for k, v in (data.get("history") or {}).items()}
    bumped: dict[str, int] = {}
    when = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    # A cell with several rows (several kinds) still gets one bump per call.
    for key, reason in _reasons(suspects).items():
        bumped[key] = cells.get(key, 0) + 1
        history.setdefault(key, []).append({"epoch": bumped[key], "at": when, "why": reason})
    if bumped:
        _save(reruns_path, {**data, "cells": {**cells, **bumped}, "history": history})
    return bumped


def _reasons(suspects: pd.DataFrame) -> dict[str, str]:
    reasons: dict[str, list[str]] = {}
    for row in suspects.reindex(columns=[*KEYS, "reason"]).itertuples(index=False):
        reasons.setdefault(cell_key(*row[:5]), []).append(str(row.reason))
    return {key: "; ".join(dict.fromkeys(parts)) for key, parts in reasons.items()}




class Rerun(TypedDict):
    """One bump of a cell's epoch, in `history`: the new epoch, when (UTC) and why."""

    epoch: int
    at: str
    why: str


class RerunsFile(TypedDict, total=False):
    """config/reruns.yaml: epochs and bumps by cell (other keys, written by hand, kept)."""

    cells: dict[str, int]
    history: dict[str, list[Rerun]]


def _save(reruns_path: str | Path, data: RerunsFile) -> None:
    """Write reruns.yaml atomically: the header, `cells` with a when/why comment per entry,
    then the rest (history) as plain YAML."""
    path = Path(reruns_path)
    history = data.get("history", {})
    lines = [HEADER, "cells:\n"]
    for key, epoch in sorted(data["cells"].items()):
        entry = yaml.safe_dump({key: epoch}, default_flow_style=False,
                               allow_unicode=True, width=10_000).rstrip("\n")
        last = (history.get(key) or [{}])[-1]
        note = f"  # {last['at']}: {last['why']}" if "at" in last else ""
        lines.append(f"  {entry}{' '.join(note.splitlines())}\n")
    rest = {k: v for k, v in data.items() if k != "cells"}
    if rest:
        lines.append("\n" + yaml.safe_dump(rest, default_flow_style=False, sort_keys=True,
                                           allow_unicode=True, width=100))
    files.write_text(path, "".join(lines))
