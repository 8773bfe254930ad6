"""The `link-comparison` stage: from the summary, every link against the baseline with
each row's prediction (results/summary/comparison.parquet), and the what-if model with
each measured link beside it (results/summary/whatif*.parquet). The tables, findings,
charts and `compare` read these files and compute none of it again."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from splitbench.compare import comparison, whatif
from splitbench.contracts.slices import InterferenceLimits
from splitbench.infra import parquet_io
from splitbench.summary.cell_summary import pick_baseline, read_links


def compare_run(summary_path: str, link_files: list[str], out: str, whatif_out: str,
                points_out: str, *, baseline_link: str | None = None,
                anchor_files: Sequence[str] = (), sweep_files: Sequence[str] = (),
                workers: dict[str, int] | None = None,
                interference_limits: InterferenceLimits | None = None) -> pd.DataFrame:
    """The comparison and the what-if model, written; returns the comparison. The drift
    anchors give sequential comparisons the machine's drift; the round-trip sweeps (and
    each model's `workers`) the prediction from measured latency."""
    summary = pd.read_parquet(summary_path)
    links = read_links(link_files)
    base = pick_baseline(summary, baseline_link)
    drift = comparison.machine_drift(anchor_files, summary, base)
    trips = comparison.round_trips(sweep_files, summary, interference_limits)
    comp = comparison.run_comparison(summary, links, base, drift, trips, workers or {})
    parquet_io.write(comp, out, {"baseline_link": base, "rows": len(comp)})
    model_rows = whatif.model(summary, links, trips, workers or {}, base)
    whatif.write(model_rows, whatif.measured_points(model_rows, comp), whatif_out,
                 points_out)
    return comp
