"""`findings`: what the run found, in sentences (findings.md), each figure from the run's
tables."""

from __future__ import annotations

import argparse

from splitbench.contracts.slice_check import typed
from splitbench.contracts.slices import Contexts, InterferenceLimits, SloSettings
from splitbench.findings import collect as findings

HELP = "what the run found, in sentences (findings.md)"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--summary", required=True)
    p.add_argument("--comparison", required=True,
                   help="the run's link comparison (link-comparison's comparison.parquet)")
    p.add_argument("--whatif", required=True,
                   help="the what-if model's Parquet (link-comparison's)")
    p.add_argument("--links", nargs="+", required=True)
    p.add_argument("--toolchain", nargs="*", default=[])
    p.add_argument("--sweeps", nargs="*", default=[])
    p.add_argument("--drift", default=None, help="the drift step's report.parquet")
    p.add_argument("--tails", default=None, help="the tail shift's Parquet (aggregate's)")
    p.add_argument("--service-levels", default=None,
                   help="the service levels' Parquet (aggregate's)")
    p.add_argument("--slo", type=typed(SloSettings), default={},
                   help="the config's service level, slo: (JSON)")
    p.add_argument("--contexts", type=typed(Contexts), required=True)
    p.add_argument("--baseline", default=None)
    p.add_argument("--out", required=True, help="findings.md")
    p.add_argument("--data", required=True, help="findings.json: the same findings as data")
    p.add_argument("--tables", default=None, help="the tables' directory: one that flags "
                   "most of its rows is said in the findings")
    p.add_argument("--interference", type=typed(InterferenceLimits), default={},
                   help="the interference limits that flag a link's measurements")


def run(args: argparse.Namespace) -> None:
    found = findings.run(args.summary, args.comparison, args.whatif, args.links,
                         args.toolchain, args.sweeps, args.drift, args.contexts,
                         args.baseline, args.out, args.data, args.tables,
                         args.interference, args.tails, args.service_levels, args.slo)
    print(f"findings: {len(found)} written to {args.out}")
