"""The stages after the cells, run in order in one process as the rules run them one
job each: aggregate (summary/), link-comparison (compare/) and tables (report/)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from splitbench.compare.stage import compare_run
from splitbench.report.table_files import render
from splitbench.summary.aggregate import summarize_run


def aggregate(request_files: list[str], link_files: list[str], contexts: dict[str, int],
              summary_out: str, tables_dir: str, *, baseline_link: str | None = None,
              **settings) -> pd.DataFrame:
    """The summary beside summary_out, the comparison and what-if model beside it, the
    tables under tables_dir; returns the summary. `settings`: interference_limits, slo,
    between_runs, anchor_files, sweep_files, workers, as the rules pass them."""
    folder = Path(summary_out).parent
    made = summarize_run(request_files, contexts, summary_out, baseline_link=baseline_link,
                         **{k: settings[k] for k in ("interference_limits", "slo",
                                                     "between_runs") if k in settings})
    compare_run(summary_out, link_files, str(folder / "comparison.parquet"),
                str(folder / "whatif.parquet"), str(folder / "whatif.points.parquet"),
                baseline_link=baseline_link,
                **{k: settings[k] for k in ("anchor_files", "sweep_files", "workers",
                                            "interference_limits") if k in settings})
    render(summary_out, str(folder / "comparison.parquet"), link_files, contexts,
           tables_dir, baseline_link=baseline_link,
           **{k: settings[k] for k in ("interference_limits", "slo") if k in settings})
    return made.cells
