"""`roundtrips`: sweep a link's added delay with single-stream requests and fit the round
trips per decoded token."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from splitbench.cells import roundtrips
from splitbench.contracts.slice_check import typed
from splitbench.contracts.slices import SweepSlice

HELP = "sweep link delay, fit round trips per token"
MEASURING = True


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spec", type=typed(SweepSlice), required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--toolchain", required=True)
    p.add_argument("--out", required=True)


def run(args: argparse.Namespace) -> None:
    result = roundtrips.sweep(args.spec, json.loads(Path(args.model).read_text()),
                              json.loads(Path(args.toolchain).read_text()), args.out)
    print(f"round trips per token with {args.spec['workers']} worker(s): "
          f"{result['round_trips_per_token']} (R2 {result['r2']}, {result['points']} points)")
