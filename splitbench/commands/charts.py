"""`charts`: every chart of the run, as a Vega-Lite spec, an offline HTML page and a PNG."""

from __future__ import annotations

import argparse

from splitbench.contracts import results
from splitbench.report import charts

HELP = "charts (HTML, PNG, Vega-Lite spec) from the results"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--summary", required=True)
    p.add_argument("--links", nargs="+", required=True)
    p.add_argument("--baseline", required=True, help="the link others are compared with")
    p.add_argument("--cells", default=results.CELLS, help="where the cell Parquet lies")
    p.add_argument("--timeline", default="",
                   help="the token timeline's cell as pair/link/model/ctx/conc "
                        "(default: the baseline's shortest-context, most-concurrent ok cell)")
    p.add_argument("--mechanisms", default="",
                   help="the mechanisms table (CSV): the decode slopes the chart draws")
    p.add_argument("--whatif", default="", help="the what-if model (Parquet)")
    p.add_argument("--whatif-points", default="",
                   help="the measured links beside their predictions (Parquet)")
    p.add_argument("--percentiles", default="",
                   help="every cell's distributions (Parquet): the token-gaps chart")
    p.add_argument("--service-levels", default="",
                   help="the service levels per cell (Parquet): the what-if chart's target")
    p.add_argument("--comparison", default="",
                   help="the run's link comparison (Parquet): the decode Δ chart")
    p.add_argument("--out", required=True, help="directory for the chart files")


def run(args: argparse.Namespace) -> None:
    written = charts.render(args.summary, args.links, args.baseline, args.out, args.cells,
                            args.timeline, args.mechanisms, args.whatif, args.whatif_points,
                            args.percentiles, args.service_levels, args.comparison)
    print(f"charts: {len(written)} files in {args.out}")
