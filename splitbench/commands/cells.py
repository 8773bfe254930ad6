"""`cells`: list the cell files of a config (for `snakemake --forcerun`), optionally those
matching `--match`."""

from __future__ import annotations

import argparse

from splitbench import configuration
from splitbench.matrix import plan

HELP = "list cell files (for --forcerun), optionally matching"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--match", default="",
                   help="comma-separated key=value over pair, link, model, ctx, conc; e.g. "
                        "model=synth,link=usb4")


def run(args: argparse.Namespace) -> None:
    config = configuration.parsed(plan.read_yaml(args.config))
    for cell in plan.matching_cells(config, args.match):
        print(cell.path)
