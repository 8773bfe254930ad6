"""The `aggregate` stage: the summary Parquet from every cell's requests, and every
table a person reads (Markdown and CSV) under results/tables/, with the notes beneath
them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from splitbench.analysis import between_runs as between_runs_term
from splitbench.analysis import (
    comparison,
    mechanisms,
    percentiles,
    service_levels,
    tail_shift,
    traffic,
)
from splitbench.analysis.cell_summary import (
    SUMMARY_KEYS,
    by_length,
    ctx_sorted,
    read_links,
    read_requests,
    rounded,
    summarize,
)
from splitbench.analysis.comparison import pick_baseline
from splitbench.analysis.releases import OVERLAP_MAX, OVERLAP_MIN, PREFILL_SHARE_MAX
from splitbench.contracts import results
from splitbench.contracts.slices import InterferenceLimits
from splitbench.infra import interference, memo, parquet_io
from splitbench.infra.tables_io import write_table
from splitbench.report import tails
from splitbench.report.side_by_side import backends_table, pairs_note, pairs_table
from splitbench.report.tables import (
    FLAG_MARK,
    ONE_RELEASE_MARK,
    OUTSIDE_MARK,
    concurrency_boundary,
    link_comparison,
    links_table,
    overlap_levels,
    overlap_note,
    overlap_table,
    single_stream_decode,
    single_stream_prefill,
    ttft_table,
)


def tables(summary: pd.DataFrame, links: pd.DataFrame, contexts: list[str],
           baseline_link: str | None = None, drift: pd.DataFrame | None = None,
           prediction: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
           interference_limits: InterferenceLimits | None = None
           ) -> dict[str, tuple[str, pd.DataFrame]]:
    """Every table by file stem: (title, frame). contexts: labels, shortest first.
    `drift` and `prediction`: see link_comparison."""
    base = pick_baseline(summary, baseline_link)
    levels = overlap_levels(summary) or "no concurrency level above 1"
    verdicts = mechanisms.table(summary, links, contexts, base, drift, prediction)
    return {
        "links": ("Links (bandwidth in Gbit/s: median ± half the spread over repeats; "
                  f"flags {FLAG_MARK}: measured while other work used the CPUs)",
                  links_table(links, interference_limits)),
        "link_comparison": (
            f"Link comparison vs {base} at concurrency 1 (Δ = link − baseline; ± is a "
            "95% interval (Student's t at the rounds' or cells' own sample size): paired "
            "rounds, or both cells' spread plus the machine's drift over the run; not "
            "resolvable: the difference lies "
            f"inside it; {FLAG_MARK}: a figure no link can have, a disagreement with the "
            "prediction from measured latency and bandwidth, or a flagged cell)",
            link_comparison(summary, contexts, base, drift, prediction)),
        "single_stream_decode": ("Single-stream decode (tok/s) by context; ✗ 400: context "
                                 f"wall, ✗ 500: overflow; {FLAG_MARK}: a flagged cell",
                                 single_stream_decode(summary, contexts)),
        "single_stream_prefill": ("Single-stream prefill (tok/s: prompt tokens / TTFT) by "
                                  f"context; {FLAG_MARK}: a flagged cell",
                                  single_stream_prefill(summary, contexts)),
        "ttft": ("Time to first token against prompt size (concurrency 1)",
                 ttft_table(summary, contexts)),
        "concurrency_boundary": (
            "Usable concurrency boundary: highest level up to which every level is ok in "
            "every release (a level where one release of its N requests failed is not "
            "usable; failure at the next level: crashes, 500 = overflow, 400 = context "
            "wall)",
            concurrency_boundary(summary, contexts)),
        "overlap": (f"True concurrency ratio (overlap), {levels}: 1 = fully concurrent, "
                    "0 = serial, below 0 = worse than serial; ± is a "
                    "95% interval from the spread over the cell's releases (Student's t at "
                    "their count), the single stream's and, where the pair has one, the "
                    f"run-to-run calibration's ({ONE_RELEASE_MARK}: a cell of one release, "
                    "whose ± is the single stream's part alone, a lower bound; one decimal "
                    "and no ±: no spread known); ✗: the cell's status; "
                    f"{FLAG_MARK}: above 1 beyond its ± (no cell can be more than fully "
                    "concurrent), below 0 beyond its ± where prefill is under "
                    f"{PREFILL_SHARE_MAX:.0%} of a single request, or a flagged cell; "
                    f"{OUTSIDE_MARK}: outside [{OVERLAP_MIN:g}, {OVERLAP_MAX:g}] but no "
                    "fault, each with its reason below; overlaps not resolvable from their "
                    "neighbours are named below",
                    overlap_table(summary, contexts)),
        "pairs": (
            "Pairs side by side: the same model, context and concurrency on each pair of "
            f"machines (± is a 95% interval of each cell's own figure: its "
            "spread, from the column `± from`, and, where the pair has one, the run-to-run "
            f"calibration's term; ✗: the cell's status; {FLAG_MARK}: a flagged cell or "
            f"link; {OUTSIDE_MARK}: an overlap outside [0, 1] that is no fault, as the "
            "overlap table says; link figures: the link checks', throughput ± half the spread over "
            "repeats). Each pair's links are compared with its own baseline in the link "
            "comparison; a difference between pairs includes everything that differs "
            "between their machines and times, not only the link",
            pairs_table(summary, links, contexts, base, interference_limits)),
        "link_traffic": (
            "Bytes per decoded token across the link (concurrency 1): measured (kernel "
            "TCP counters of the RPC connections) against the prediction from the "
            "model's GGUF header, where its layers sit and the context (A→B: the hidden "
            "state, the attention mask over the padded KV cells, and a per-step RPC "
            "overhead measured on the baseline link's shortest context); "
            f"{FLAG_MARK}: more than {traffic.TOLERANCE:.0%} apart; transfer: the bytes "
            "above the link's burst allowance at its measured throughput",
            traffic.link_traffic(summary, links, contexts, base)),
        "mechanisms": (
            f"Mechanisms vs {base}: decode delta (ms/token) less its bandwidth term "
            "(the token's bytes at each link's throughput) against the links' request-"
            "response latency difference (slope = round trips per token) and prefill "
            "relative change against relative one-way bandwidth (slope = elasticity); "
            f"fits through the origin, ± is a 95% interval (t at the fit's degrees of freedom)",
            verdicts),
        "backends": (
            "Backends side by side: one model shape split by llama.cpp's RPC and by "
            "vLLM's tensor (TP=2) and pipeline (PP=2) parallel, on the same pair and "
            f"links (± is a 95% interval, as in the pairs table; ✗: the cell's status; "
            f"{FLAG_MARK}: a flagged cell; {OUTSIDE_MARK}: an overlap outside [0, 1] that "
            "is no fault, as the overlap table says; bytes/token: the kernel's counters of the "
            "connections between the hosts during decode; each model's decode verdict "
            "from the mechanisms table is below)",
            backends_table(summary, contexts, base, verdicts)),
    }


def aggregate(request_files: list[str], link_files: list[str], contexts: dict[str, int],
              summary_out: str, tables_dir: str, *, baseline_link: str | None = None,
              interference_limits: InterferenceLimits | None = None,
              anchor_files: Sequence[str] = (), sweep_files: Sequence[str] = (),
              workers: dict[str, int] | None = None,
              slo: dict | None = None,
              between_runs: dict | None = None) -> pd.DataFrame:
    """Summary Parquet and every table (Markdown and CSV) under tables_dir. The drift
    anchors give sequential comparisons the machine's drift; the round-trip sweeps
    (and each model's `workers`) the prediction from measured latency; `between_runs`
    (per pair) the run-to-run term of each cell's ± (analysis/between_runs.py)."""
    per_cell = cell_tables(request_files, contexts, Path(summary_out).parent / MEMO,
                           baseline_link, interference_limits, slo)
    # Each figure's ± with the run-to-run term where the pair has a calibration.
    summary = between_runs_term.apply(ctx_sorted(per_cell["cells"], SUMMARY_KEYS,
                                                 by_length(contexts)).reset_index(drop=True),
                                      between_runs or {})
    parquet_io.write(summary, summary_out, {
        "cells": len(summary), "contexts": contexts, "baseline_link": baseline_link,
        "interference": interference.settings(interference_limits)})
    links = read_links(link_files)
    base = pick_baseline(summary, baseline_link)
    drift = comparison.machine_drift(anchor_files, summary, base)
    trips = comparison.round_trips(sweep_files, summary, interference_limits)

    def prediction(rows: pd.DataFrame) -> pd.DataFrame:
        return comparison.predicted_decode_delta(rows, links, trips, workers or {}, drift)

    note = flag_note(summary)
    for stem, (title, frame) in tables(summary, links, by_length(contexts), baseline_link,
                                       drift, prediction, interference_limits).items():
        # The cells' flags under every table of cells that marks them; the pairs
        # table names its own cells' and links'.
        marks = FLAG_MARK in title and stem not in ("links", "pairs")
        if stem == "pairs":
            below = pairs_note(summary, links, by_length(contexts), base,
                               interference_limits)
        elif stem == "overlap":
            below = overlap_note(summary) + (note if marks else "")
        else:
            below = note if marks else ""
        write_table(frame, Path(tables_dir) / stem, title, below)
    dist = between_runs_term.apply_percentiles(per_cell["percentiles"], between_runs or {})
    parquet_io.write(dist, str(Path(summary_out).with_name("percentiles.parquet")),
                     {"tail_min_samples": percentiles.TAIL_MIN_SAMPLES,
                      "bootstrap_draws": percentiles.BOOTSTRAP_DRAWS})
    write_table(tails.table(dist, by_length(contexts)), Path(tables_dir) / "percentiles",
                tails.title())
    shifts = per_cell["tail_shift"]
    parquet_io.write(tail_shift.with_allowance(shifts),
                     str(Path(summary_out).with_name("tail_shift.parquet")),
                     {"bootstrap_draws": percentiles.BOOTSTRAP_DRAWS})
    levels = per_cell["service_levels"]
    parquet_io.write(levels, str(Path(summary_out).with_name("service_levels.parquet")),
                     {"slo": slo or {}})
    write_table(tails.service_levels_table(levels, by_length(contexts)),
                Path(tables_dir) / "service_levels", tails.service_levels_title(slo or {}))
    root = Path(summary_out).parent.parent  # <root>/summary/cells.parquet
    write_table(remeasured(results.archived_requests(root), summary),
                Path(tables_dir) / "remeasured",
                "Re-measured cells: the archived measurement against the current one")
    return summary


# Beside the summary: each per-cell computation's rows, kept for the next aggregate
# (infra/memo.py), so that a changed cell is all it redoes.
MEMO = ".memo"
PER_CELL = ("cells", "percentiles", "tail_shift", "service_levels")
# The modules that make those rows (with all they import): a kept row stays valid
# through a change to any other code (this module's tables, the report, the cells).
PER_CELL_CODE = ("splitbench.analysis.cell_summary", "splitbench.analysis.percentiles",
                 "splitbench.analysis.tail_shift", "splitbench.analysis.service_levels",
                 "splitbench.analysis.paired", "splitbench.infra.memo")


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


def flag_note(summary: pd.DataFrame) -> str:
    """Markdown naming every flagged cell and why, for the tables that mark them."""
    flagged = summary[summary["flags"].notna()] if "flags" in summary else summary.iloc[:0]
    if flagged.empty:
        return ""
    lines = [f"- {'/'.join(str(row[k]) for k in SUMMARY_KEYS)}: {row['flags']}"
             for _, row in flagged.iterrows()]
    return (f"\n{FLAG_MARK} flagged cells: measured under interference or with tokens "
            "that share timestamps (re-measure with `python -m splitbench drift --apply` "
            "and `snakemake all`), or without interference figures (not checked):\n\n"
            + "\n".join(lines) + "\n")


def remeasured(archived: list[Path], summary: pd.DataFrame) -> pd.DataFrame:
    """One row per archived measurement: when it was superseded, and its decode and
    prefill against the cell's current figures."""
    columns = ["pair", "link", "model", "ctx", "conc", "archived", "decode before (ms/token)",
               "decode now (ms/token)", "decode Δ (ms/token)", "prefill before (tok/s)",
               "prefill now (tok/s)", "status before", "status now"]
    rows = []
    current = summary.set_index(SUMMARY_KEYS)
    for path in archived:
        old = read_requests([str(path)])
        ok = old[old["status"] == "ok"]
        key = tuple(old.iloc[0][k] for k in SUMMARY_KEYS)
        now = current.loc[key] if key in current.index else None
        before = ok["decode_ms_per_token"].median() if len(ok) else None
        after = now["decode_ms_per_token"] if now is not None else None
        rows.append([*key, results.archived_when(path), rounded(before, 3), rounded(after, 3),
                     rounded(after - before, 3) if None not in (before, after) else None,
                     rounded(ok["prefill_tps"].median() if len(ok) else None, 0),
                     rounded(now["prefill_tps"] if now is not None else None, 0),
                     old["cell_status"].iloc[0], now["status"] if now is not None else None])
    return pd.DataFrame(rows, columns=columns)
