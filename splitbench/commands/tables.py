"""`tables`: every table a person reads, as Markdown and CSV under results/tables/,
rendered from the summary and the link comparison (report/)."""

from __future__ import annotations

import argparse

from splitbench.contracts.slice_check import typed
from splitbench.contracts.slices import Contexts, InterferenceLimits, SloSettings
from splitbench.report.table_files import render

HELP = "the tables (Markdown and CSV) from the summary and the link comparison"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--summary", required=True)
    p.add_argument("--comparison", required=True, help="the run's comparison.parquet")
    p.add_argument("--links", nargs="+", required=True)
    p.add_argument("--contexts", type=typed(Contexts), required=True)
    p.add_argument("--baseline", default=None, help="the link others are compared with")
    p.add_argument("--interference", type=typed(InterferenceLimits), default={},
                   help="the config's interference: limits (JSON)")
    p.add_argument("--slo", type=typed(SloSettings), default={},
                   help="the config's service level, slo: (JSON)")
    p.add_argument("--tables", required=True, help="the tables' directory")


def run(args: argparse.Namespace) -> None:
    render(args.summary, args.comparison, args.links, args.contexts, args.tables,
           baseline_link=args.baseline, interference_limits=args.interference,
           slo=args.slo)
