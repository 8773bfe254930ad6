"""The stages after the cells, run in order in one process as the rules run them one
job each: aggregate (summary/), link-comparison (compare/) and tables (report/)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from splitbench.compare.stage import compare_run
from splitbench.report.table_files import render
from splitbench.summary.aggregate import summarize_run
from tests.support import write_cell
from tests.support.matrices import CONTEXTS, ORDER, link_row, request


def two_links(where: Path) -> tuple[list[str], list[str]]:
    """The cells of two links (fast: 1 ms a token, 100 µs of request-response latency,
    10 Gbit/s; slow: 2 ms, 600 µs, 1 Gbit/s) at every context and one and two streams,
    and their link results, under `where`: (request files, link files)."""
    requests = [write_cell(where, link, ctx, conc, [
        request(i, [gap] * 8, send_ns=0, prompt=CONTEXTS[ctx]) for i in range(conc)])
        for link, gap in [("fast", 1.0), ("slow", 2.0)] for ctx in ORDER for conc in [1, 2]]
    links = []
    for name, rr, gbps in [("fast", 100.0, 10.0), ("slow", 600.0, 1.0)]:
        path = where / "links" / "lab" / f"{name}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist([link_row(name, rr, gbps)]), path)
        links.append(str(path))
    return requests, links


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
