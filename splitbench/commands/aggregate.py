"""`aggregate`: the summary Parquet from every cell's requests, and each cell's
percentiles, tail shift and service levels beside it (summary/)."""

from __future__ import annotations

import argparse

from splitbench.contracts.slice_check import typed
from splitbench.contracts.slices import BetweenRuns, Contexts, InterferenceLimits, SloSettings
from splitbench.summary.aggregate import summarize_run

HELP = "the summary Parquet (and each cell's percentiles, tails, levels) from cell files"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--contexts", type=typed(Contexts), required=True)
    p.add_argument("--interference", type=typed(InterferenceLimits), default={},
                   help="the config's interference: limits (JSON)")
    p.add_argument("--baseline", default=None, help="the link others are compared with")
    p.add_argument("--summary", required=True)
    p.add_argument("--requests", nargs="+", required=True)
    p.add_argument("--slo", type=typed(SloSettings), default={},
                   help="the config's service level, slo: (JSON)")
    p.add_argument("--between-runs", type=typed(BetweenRuns), default={},
                   help="per pair, the run-to-run calibration its figures carry (JSON)")


def run(args: argparse.Namespace) -> None:
    summarize_run(args.requests, args.contexts, args.summary, baseline_link=args.baseline,
                  interference_limits=args.interference, slo=args.slo,
                  between_runs=args.between_runs)
