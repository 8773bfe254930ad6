"""`aggregate`: the summary Parquet from every cell's requests, and the tables a person
reads (Markdown and CSV) under results/tables/."""

from __future__ import annotations

import argparse

from splitbench.contracts.slice_check import typed
from splitbench.contracts.slices import (
    BetweenRuns,
    Contexts,
    InterferenceLimits,
    SloSettings,
    WorkersByModel,
)
from splitbench.report import aggregate

HELP = "summary Parquet and tables from cell files"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--contexts", type=typed(Contexts), required=True)
    p.add_argument("--interference", type=typed(InterferenceLimits), default={},
                   help="the config's interference: limits (JSON)")
    p.add_argument("--baseline", default=None, help="the link others are compared with")
    p.add_argument("--summary", required=True)
    p.add_argument("--tables", required=True)
    p.add_argument("--links", nargs="+", required=True)
    p.add_argument("--requests", nargs="+", required=True)
    p.add_argument("--anchors", nargs="*", default=[],
                   help="drift anchors' request files: the machine's drift over time")
    p.add_argument("--sweeps", nargs="*", default=[],
                   help="round-trip sweeps: the prediction from measured latency")
    p.add_argument("--workers", type=typed(WorkersByModel), default={},
                   help="each model's RPC workers (JSON), to pick its sweep")
    p.add_argument("--slo", type=typed(SloSettings), default={},
                   help="the config's service level, slo: (JSON)")
    p.add_argument("--between-runs", type=typed(BetweenRuns), default={},
                   help="per pair, the run-to-run calibration its figures carry (JSON)")


def run(args: argparse.Namespace) -> None:
    aggregate.aggregate(args.requests, args.links, args.contexts, args.summary, args.tables,
                        baseline_link=args.baseline, interference_limits=args.interference,
                        anchor_files=args.anchors, sweep_files=args.sweeps,
                        workers=args.workers, slo=args.slo,
                        between_runs=args.between_runs)
