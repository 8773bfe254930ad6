"""The `aggregate` stage's statistics: every cell's requests into the summary
(results/summary/cells.parquet: one row per cell, each figure with its ±), and beside it
each cell's percentiles, tail shift and service levels. Only the cells whose files
changed are computed again (infra/memo.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from splitbench.contracts import results
from splitbench.contracts.slices import InterferenceLimits
from splitbench.infra import interference, memo, parquet_io
from splitbench.summary import between_runs as between_runs_term
from splitbench.summary import percentiles, service_levels, tail_shift
from splitbench.summary.cell_summary import (
    SUMMARY_KEYS,
    by_length,
    ctx_sorted,
    pick_baseline,
    summarize,
)


@dataclass
class Summary:
    """What the stage wrote, for the stages after it in the same process."""
    cells: pd.DataFrame
    percentiles: pd.DataFrame
    tail_shift: pd.DataFrame
    service_levels: pd.DataFrame


def summarize_run(request_files: list[str], contexts: dict[str, int], summary_out: str, *,
                  baseline_link: str | None = None,
                  interference_limits: InterferenceLimits | None = None,
                  slo: dict | None = None, between_runs: dict | None = None) -> Summary:
    """The summary Parquet and the per-cell Parquets beside it (percentiles, tail shift,
    service levels). `between_runs` (per pair): the run-to-run term of each cell's ±
    (summary/between_runs.py)."""
    per_cell = cell_tables(request_files, contexts, Path(summary_out).parent / MEMO,
                           baseline_link, interference_limits, slo)
    # Each figure's ± with the run-to-run term where the pair has a calibration.
    cells = between_runs_term.apply(ctx_sorted(per_cell["cells"], SUMMARY_KEYS,
                                               by_length(contexts)).reset_index(drop=True),
                                    between_runs or {})
    parquet_io.write(cells, summary_out, {
        "cells": len(cells), "contexts": contexts, "baseline_link": baseline_link,
        "interference": interference.settings(interference_limits)})

    def beside(layout_path: str) -> str:
        """A file of the results layout's summary folder, beside summary_out."""
        return str(Path(summary_out).with_name(Path(layout_path).name))

    dist = between_runs_term.apply_percentiles(per_cell["percentiles"], between_runs or {})
    parquet_io.write(dist, beside(results.PERCENTILES),
                     {"tail_min_samples": percentiles.TAIL_MIN_SAMPLES,
                      "bootstrap_draws": percentiles.BOOTSTRAP_DRAWS})
    shifts = tail_shift.with_allowance(per_cell["tail_shift"])
    parquet_io.write(shifts, beside(results.TAIL_SHIFT),
                     {"bootstrap_draws": percentiles.BOOTSTRAP_DRAWS})
    levels = per_cell["service_levels"]
    parquet_io.write(levels, beside(results.SERVICE_LEVELS),
                     {"slo": slo or {}})
    return Summary(cells, dist, shifts, levels)


# Beside the summary: each per-cell computation's rows, kept for the next aggregate
# (infra/memo.py), so that a changed cell is all it redoes.
MEMO = ".memo"
PER_CELL = ("cells", "percentiles", "tail_shift", "service_levels")
# The modules that make those rows (with all they import): a kept row stays valid
# through a change to any other code (this module's tables, the report, the cells).
PER_CELL_CODE = ("splitbench.summary.cell_summary", "splitbench.summary.percentiles",
                 "splitbench.summary.tail_shift", "splitbench.summary.service_levels",
                 "splitbench.summary.paired", "splitbench.infra.memo")


def cell_tables(request_files: list[str], contexts: dict[str, int], store: Path,
                baseline_link: str | None, interference_limits: InterferenceLimits | None,
                slo: dict | None) -> dict[str, pd.DataFrame]:
    """Every per-cell table (PER_CELL): each cell's summary row, percentiles, tail shift
    (before the run's joint allowance) and service levels, computed together for the
    cells whose files changed, a batch at a time (each file read once: the readers keep
    a batch's files), the rest as kept. A cell's rows also read its single-stream cell
    (a concurrent cell's prefill share) and the baseline link's cell (its gaps' shift)."""
    by_cell: dict[tuple, list[str]] = {}
    for path in request_files:
        by_cell.setdefault(cell_key(path), []).append(path)
    base = pick_baseline(pd.DataFrame({"link": [key[1] for key in by_cell]}), baseline_link)

    def single_stream(path: str) -> list[str]:
        """The single-stream cell's files a cell's summary row reads (prefill share)."""
        return by_cell.get((*cell_key(path)[:-1], 1), [])

    def baseline(path: str) -> list[str]:
        """The baseline link's cell's files a cell's tail shift reads (its gaps)."""
        pair, _, model, ctx, conc = cell_key(path)
        return by_cell.get((pair, base, model, ctx, conc), [])

    def read_too(path: str) -> list[str]:
        return [*single_stream(path), *baseline(path)]

    def with_(files: list[str], extra: Callable[[str], list[str]]) -> list[str]:
        return list(dict.fromkeys(files + [f for path in files for f in extra(path)]))

    def compute(files: list[str]) -> dict[str, pd.DataFrame]:
        # Each table gets only the extra files its rows read: rows of those cells
        # themselves would be left out (memo.tables) after being computed for nothing.
        return {"cells": summarize(with_(files, single_stream), contexts,
                                   interference_limits),
                "percentiles": percentiles.table(files),
                "tail_shift": tail_shift.shifts(with_(files, baseline), base),
                "service_levels": service_levels.table(files, slo)}

    return memo.tables(store, request_files, compute, cell_key, SUMMARY_KEYS,
                       {"contexts": contexts, "interference": interference_limits,
                        "slo": slo, "baseline": base}, read_too, PER_CELL,
                       batch_order=lambda key: (key[0], key[2], key[3], key[4], key[1]),
                       code=PER_CELL_CODE)


def cell_key(path: str) -> tuple:
    """A cell's keys from its requests file's path."""
    found = results.identity(path)
    return tuple(found[k] for k in SUMMARY_KEYS)
