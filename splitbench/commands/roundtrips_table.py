"""`roundtrips-table`: the round trips per token table from the delay sweeps."""

from __future__ import annotations

import argparse

from splitbench.compare import roundtrips_table
from splitbench.contracts.slice_check import typed
from splitbench.contracts.slices import InterferenceLimits
from splitbench.infra import tables_io

HELP = "the round trips per token table"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sweeps", nargs="+", required=True)
    p.add_argument("--out", required=True, help="table path without suffix")
    p.add_argument("--interference", type=typed(InterferenceLimits), default={},
                   help="the config's interference: limits (JSON), which flag a sweep")


def run(args: argparse.Namespace) -> None:
    tables_io.write_table(roundtrips_table.table(args.sweeps, args.interference), args.out,
                          "Round trips per decoded token (median decode step against "
                          "measured request-response latency)")
