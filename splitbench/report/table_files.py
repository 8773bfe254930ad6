"""Every table a person reads, written under results/tables/ as Markdown and CSV with
the notes beneath them: rendered from the summary, the run's link comparison and the
per-cell Parquets beside them (the `aggregate` command writes them after those)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from splitbench.compare import mechanisms, traffic
from splitbench.contracts import results
from splitbench.contracts.slices import InterferenceLimits
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
from splitbench.summary.aggregate import Summary
from splitbench.summary.cell_summary import (
    SUMMARY_KEYS,
    by_length,
    pick_baseline,
    read_links,
    read_requests,
    rounded,
)
from splitbench.summary.releases import OVERLAP_MAX, OVERLAP_MIN, PREFILL_SHARE_MAX


def tables(summary: pd.DataFrame, comp: pd.DataFrame, links: pd.DataFrame,
           contexts: list[str], baseline_link: str | None = None,
           interference_limits: InterferenceLimits | None = None
           ) -> dict[str, tuple[str, pd.DataFrame]]:
    """Every table by file stem: (title, frame). contexts: labels, shortest first;
    `comp`: the run's link comparison (comparison.run_comparison)."""
    base = pick_baseline(summary, baseline_link)
    levels = overlap_levels(summary) or "no concurrency level above 1"
    verdicts = mechanisms.table(summary, comp, links, contexts)
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
            link_comparison(summary, comp, contexts)),
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


def render(summary_path: str, comparison_path: str, link_files: list[str],
           contexts: dict[str, int], tables_dir: str, *, baseline_link: str | None = None,
           interference_limits: InterferenceLimits | None = None,
           slo: dict | None = None) -> None:
    """The `tables` stage: every table from the files the summary and the link
    comparison wrote (<summary's folder>/*.parquet), the links' and the archive's."""
    folder = Path(summary_path).parent
    made = Summary(*(pd.read_parquet(folder / Path(name).name) for name in (
        summary_path, results.PERCENTILES, results.TAIL_SHIFT, results.SERVICE_LEVELS)))
    root = folder.parent  # <root>/summary/cells.parquet
    write_tables(made, pd.read_parquet(comparison_path), read_links(link_files), contexts,
                 tables_dir, baseline_link=baseline_link,
                 interference_limits=interference_limits, slo=slo,
                 archived=results.archived_requests(root))


def write_tables(summary: Summary, comp: pd.DataFrame, links: pd.DataFrame,
                 contexts: dict[str, int], tables_dir: str, *,
                 baseline_link: str | None = None,
                 interference_limits: InterferenceLimits | None = None,
                 slo: dict | None = None, archived: Sequence[Path] = ()) -> None:
    """Every table (Markdown and CSV) under tables_dir, each with its note: the cells'
    flags under every table that marks them; the pairs table names its own.
    `archived`: the requests files of cells measured again (results.archived_requests)."""
    cells, order = summary.cells, by_length(contexts)
    base = pick_baseline(cells, baseline_link)
    note = flag_note(cells)
    for stem, (title, frame) in tables(cells, comp, links, order, baseline_link,
                                       interference_limits).items():
        marks = FLAG_MARK in title and stem not in ("links", "pairs")
        if stem == "pairs":
            below = pairs_note(cells, links, order, base, interference_limits)
        elif stem == "overlap":
            below = overlap_note(cells) + (note if marks else "")
        else:
            below = note if marks else ""
        write_table(frame, Path(tables_dir) / stem, title, below)
    write_table(tails.table(summary.percentiles, order), Path(tables_dir) / "percentiles",
                tails.title())
    write_table(tails.service_levels_table(summary.service_levels, order),
                Path(tables_dir) / "service_levels", tails.service_levels_title(slo or {}))
    write_table(remeasured(list(archived), cells),
                Path(tables_dir) / "remeasured",
                "Re-measured cells: the archived measurement against the current one")


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


def remeasured(archived: Sequence[Path], summary: pd.DataFrame) -> pd.DataFrame:
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

