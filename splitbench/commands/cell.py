"""`cell`: measure one cell (model x link x context x concurrency) against its block's
launch."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from splitbench.cells import measure
from splitbench.contracts.slice_check import typed
from splitbench.contracts.slices import CellSlice, LinkSlice

HELP = "measure one cell"
MEASURING = True


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cell", type=typed(CellSlice), required=True)
    p.add_argument("--link-spec", type=typed(LinkSlice), required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--launch", required=True)
    p.add_argument("--toolchain", required=True)
    p.add_argument("--link-result", required=True)
    p.add_argument("--reference-result", default="",
                   help="a paired cell's reference: the baseline link's verification")
    p.add_argument("--tokens-out", required=True)
    p.add_argument("--requests-out", required=True)


def run(args: argparse.Namespace) -> None:
    frame = measure.run(args.cell, args.link_spec, json.loads(Path(args.model).read_text()),
                        json.loads(Path(args.launch).read_text()), args.toolchain,
                        args.link_result, args.tokens_out, args.requests_out,
                        args.reference_result or None)
    ok = frame[frame["status"] == "ok"]
    print(f"cell: {frame['cell_status'].iloc[0]}; decode {ok['decode_tps'].median():.1f} "
          f"tok/s, prefill {ok['prefill_tps'].median():.0f} tok/s over "
          f"{len(ok)}/{len(frame)} ok requests")
