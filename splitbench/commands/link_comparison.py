"""`link-comparison`: every link against the baseline, with each row's prediction
(comparison.parquet), and the what-if model beside it (compare/)."""

from __future__ import annotations

import argparse

from splitbench.compare.stage import compare_run
from splitbench.contracts.slice_check import typed
from splitbench.contracts.slices import InterferenceLimits, WorkersByModel

HELP = "the run's link comparison and what-if model from the summary"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--summary", required=True)
    p.add_argument("--links", nargs="+", required=True)
    p.add_argument("--baseline", default=None, help="the link others are compared with")
    p.add_argument("--anchors", nargs="*", default=[],
                   help="drift anchors' request files: the machine's drift over time")
    p.add_argument("--sweeps", nargs="*", default=[],
                   help="round-trip sweeps: the prediction from measured latency")
    p.add_argument("--workers", type=typed(WorkersByModel), default={},
                   help="each model's RPC workers (JSON), to pick its sweep")
    p.add_argument("--interference", type=typed(InterferenceLimits), default={},
                   help="the config's interference: limits (JSON)")
    p.add_argument("--out", required=True, help="comparison.parquet")
    p.add_argument("--whatif", required=True, help="the what-if model's Parquet")
    p.add_argument("--points", required=True, help="the measured links beside it")


def run(args: argparse.Namespace) -> None:
    comp = compare_run(args.summary, args.links, args.out, args.whatif, args.points,
                       baseline_link=args.baseline, anchor_files=args.anchors,
                       sweep_files=args.sweeps, workers=args.workers,
                       interference_limits=args.interference)
    print(f"link comparison: {len(comp)} rows written to {args.out}")
