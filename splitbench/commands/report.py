"""`report`: one offline HTML page of the run: findings, tables, charts, provenance."""

from __future__ import annotations

import argparse

from splitbench.contracts import results
from splitbench.contracts.slice_check import typed
from splitbench.contracts.slices import PairViews
from splitbench.report import page

HELP = "one offline HTML page: tables, charts, provenance"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--summary", required=True)
    p.add_argument("--links", nargs="+", required=True)
    p.add_argument("--toolchain", nargs="+", required=True)
    p.add_argument("--requests", nargs="+", required=True)
    p.add_argument("--cells", default=results.CELLS, help="where the cell Parquet lies")
    p.add_argument("--tables", required=True, help="directory of the tables (.md, .csv)")
    p.add_argument("--charts", required=True, help="directory of the charts (.vl.json)")
    p.add_argument("--drift", default=None, help="the drift step's report.parquet")
    p.add_argument("--pairs", type=typed(PairViews), default={},
                   help="where each pair's hosts are (JSON, pairs_slice of the config)")
    p.add_argument("--findings", default=None,
                   help="the run's findings (Markdown), the page's first section; a "
                        "missing file gives a note that none were written")
    p.add_argument("--out", required=True)


def run(args: argparse.Namespace) -> None:
    size = page.write(args.out, summary_path=args.summary, link_files=args.links,
                      toolchain_files=args.toolchain, tables_dir=args.tables,
                      charts_dir=args.charts, request_files=args.requests,
                      cells_dir=args.cells, drift_path=args.drift, config_pairs=args.pairs,
                      findings_path=args.findings)
    print(f"report: {args.out} ({size / 1e6:.2f} MB)")
