"""`compare`: two results directories side by side (compare/run_compare.py), as
Markdown on the terminal and, with --out, compare.md and compare.html there."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from splitbench.compare import run_compare
from splitbench.errors import SplitbenchError
from splitbench.infra import intervals
from splitbench.infra.tables_io import to_markdown
from splitbench.report import side_by_side
from splitbench.report.html_parts import markdown

HELP = ("two results directories side by side: each figure's change with its ±, marked "
        "where it survives Holm's correction over all the figures")


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="the first run's results directory (A)")
    p.add_argument("b", help="the second run's results directory (B)")
    p.add_argument("--out", default=None,
                   help="a directory for compare.md and compare.html (one page)")


def run(args: argparse.Namespace) -> int:
    try:
        a, b = run_compare.read_summary(args.a), run_compare.read_summary(args.b)
    except FileNotFoundError as exc:
        raise SplitbenchError(str(exc)) from exc
    text = page_markdown(args.a, args.b, a, b)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.md").write_text(text)
        (out / "compare.html").write_text(
            "<!doctype html><meta charset=utf-8><title>splitbench: two runs</title>"
            "<style>body{font:15px/1.45 system-ui,sans-serif;max-width:1280px;margin:0 "
            "auto;padding:0 24px}.table-wrap{overflow-x:auto}td,th{padding:2px 8px;"
            "white-space:nowrap}td.long{white-space:normal}</style>" + markdown(text))
    return 0


def page_markdown(path_a: str, path_b: str, a: pd.DataFrame, b: pd.DataFrame) -> str:
    """The page: what was tested and what chance alone gives, then the setup, the
    links' costs, the cells, and the findings that changed."""
    drift_a, drift_b = run_compare.drift(path_a, a), run_compare.drift(path_b, b)
    compared, changed, tally = run_compare.flag(
        run_compare.cells(a, b, drift_a, drift_b),
        run_compare.costs(run_compare.link_costs(path_a, a, drift_a),
                          run_compare.link_costs(path_b, b, drift_b)))
    lines = ["# Two runs compared", "", f"A: `{path_a}`, B: `{path_b}`. "
             f"{side_by_side.two_runs_line(compared)} {tally.line()}.", "",
             f"A change is B's figure less A's; ± is its {intervals.LEVEL:.0%} interval: "
             "both runs' standard errors (each cell's own, at its samples' degrees of "
             "freedom, and the machine's run-to-run variation where calibrated, else its "
             "drift over the run, from its anchors) combined, "
             "with Student's t at their Welch-Satterthwaite degrees of freedom; p is the "
             "two-sided p-value of the change. With this many figures about one in twenty "
             "lies beyond its own ± by chance alone, so ⚠ marks only a change that "
             "survives Holm's step-down correction over all the figures tested (at most "
             f"{run_compare.FAMILY_ALPHA:.0%} chance of any ⚠ with nothing changed); a "
             "cell either run flagged is marked in its status and not tested. "
             f"{run_compare.between_note(a, b)} {run_compare.samples_note(a, b)}".rstrip(),
             ""]
    setup = run_compare.provenance_changed(path_a, path_b)
    lines += ["## What differs in their setup", ""]
    lines += [f"- {line}" for line in setup] or ["- nothing recorded differs (builds, "
                                                  "link facts)"]
    # The links' costs first: differences within each run, which the machine's state
    # that day cancels, are what a change of cable or driver moves.
    lines += ["", "## What each link costs decode, in each run", "",
              "Each link's single-stream decode against its own run's baseline link, as "
              "each run's link comparison measured it (paired rounds where the cell was "
              "paired: rounds - 1 degrees of freedom), and how that cost changed. A cost "
              "is a difference within one run, so the machine's level that day cancels; "
              "its ± holds each run's own spread. A ± only a lower bound (sequential "
              "cells with no drift measured, or a single request) is not tested.", ""]
    lines += [to_markdown(side_by_side.two_runs_costs_table(changed)) if len(changed) else
              "none: no link was compared with the baseline in both runs", ""]
    lines += ["## Cells in both", "", to_markdown(side_by_side.two_runs_table(compared))
              if len(compared) else "none", ""]
    alone = run_compare.only_in(a, b)
    lines += ["## Cells in one run only", "",
              to_markdown(alone) if len(alone) else "none: both measured the same cells",
              ""]
    changed_findings = run_compare.findings_changed(path_a, path_b)
    if changed_findings.not_compared:
        return "\n".join([*lines, "## Findings that changed", "",
                          f"not compared: {changed_findings.not_compared}", ""]) + "\n"
    gone, new = changed_findings.a_only, changed_findings.b_only
    moved = changed_findings.moved
    lines += ["## Findings that changed", "",
              f"{moved} headline{' reads' if moved == 1 else 's read'} the same but for "
              "their figures (the tables above say which moved: ⚠ beyond chance); these "
              "say something else:", ""]
    lines += [f"- A only: {h}" for h in gone] + [f"- B only: {h}" for h in new] or \
        ["- none: every headline says the same"]
    return "\n".join(lines) + "\n"
