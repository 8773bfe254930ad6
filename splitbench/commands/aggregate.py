"""`aggregate`: the summary Parquet from every cell's requests (summary/), the run's one
link comparison beside it (compare/), and the tables a person reads (Markdown and CSV)
under results/tables/ (report/)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from splitbench.compare import comparison
from splitbench.contracts import results
from splitbench.contracts.slice_check import typed
from splitbench.contracts.slices import (
    BetweenRuns,
    Contexts,
    InterferenceLimits,
    SloSettings,
    WorkersByModel,
)
from splitbench.infra import parquet_io
from splitbench.report.table_files import write_tables
from splitbench.summary.aggregate import summarize_run
from splitbench.summary.cell_summary import pick_baseline, read_links

HELP = "summary Parquet, the link comparison and tables from cell files"


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
    aggregate(args.requests, args.links, args.contexts, args.summary, args.tables,
              baseline_link=args.baseline, interference_limits=args.interference,
              anchor_files=args.anchors, sweep_files=args.sweeps, workers=args.workers,
              slo=args.slo, between_runs=args.between_runs)


def aggregate(request_files: list[str], link_files: list[str], contexts: dict[str, int],
              summary_out: str, tables_dir: str, *, baseline_link: str | None = None,
              interference_limits: InterferenceLimits | None = None,
              anchor_files: Sequence[str] = (), sweep_files: Sequence[str] = (),
              workers: dict[str, int] | None = None, slo: dict | None = None,
              between_runs: dict | None = None) -> pd.DataFrame:
    """The summary and the Parquets beside it, the link comparison
    (<summary's folder>/comparison.parquet) and every table under tables_dir. The drift
    anchors give sequential comparisons the machine's drift; the round-trip sweeps (and
    each model's `workers`) the prediction from measured latency."""
    made = summarize_run(request_files, contexts, summary_out, baseline_link=baseline_link,
                         interference_limits=interference_limits, slo=slo,
                         between_runs=between_runs)
    links = read_links(link_files)
    base = pick_baseline(made.cells, baseline_link)
    drift = comparison.machine_drift(anchor_files, made.cells, base)
    trips = comparison.round_trips(sweep_files, made.cells, interference_limits)
    comp = comparison.run_comparison(made.cells, links, base, drift, trips, workers or {})
    parquet_io.write(comp, Path(summary_out).with_name(Path(results.COMPARISON).name),
                     {"baseline_link": base, "rows": len(comp)})
    root = Path(summary_out).parent.parent  # <root>/summary/cells.parquet
    write_tables(made, comp, links, contexts, tables_dir, baseline_link=baseline_link,
                 interference_limits=interference_limits, slo=slo,
                 archived=results.archived_requests(root))
    return made.cells
