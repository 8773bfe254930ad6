"""`drift`: name the cells measured under thermal drift (from the drift anchors); with
`--apply`, give them a new epoch in config/reruns.yaml so the next run re-measures them."""

from __future__ import annotations

import argparse

import pandas as pd

from splitbench.contracts import results
from splitbench.contracts.slice_check import typed
from splitbench.contracts.slices import DriftSettings, InterferenceLimits
from splitbench.health import drift, reruns

HELP = ("name cells measured under thermal drift; --apply gives them a new epoch in "
        "config/reruns.yaml")


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--summary", default=results.SUMMARY)
    p.add_argument("--anchors", nargs="*", default=[])
    p.add_argument("--settings", type=typed(DriftSettings), default={})
    p.add_argument("--interference", type=typed(InterferenceLimits), default={},
                   help="the config's interference: limits (JSON): an anchor above them "
                        "fails the anchor check")
    p.add_argument("--report", default=results.DRIFT_REPORT)
    p.add_argument("--table", default=f"{results.TABLES}/drift", help="path without suffix")
    p.add_argument("--apply", action="store_true",
                   help="record a new epoch for the cells in the existing report")
    p.add_argument("--reruns", default="config/reruns.yaml")


def run(args: argparse.Namespace) -> None:
    if args.apply:
        suspects = pd.read_parquet(args.report)
        reruns.apply(suspects, args.reruns)
        print(f"{len(suspects)} cell(s) get a new epoch in {args.reruns}; "
              "`snakemake --cores 1 all` re-measures exactly them")
        return
    suspects = drift.main_drift(args.summary, args.anchors, args.settings, args.report,
                                args.table, False, args.reruns, args.interference)
    for line in drift.outcome_lines(suspects):
        print(f"drift: {line}")
    print(f"drift: see {args.table}.md")
