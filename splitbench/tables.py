"""From cell Parquet to the summary and the tables a person reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from splitbench import metrics, parquet_io

SUMMARY_KEYS = ["pair", "link", "model", "ctx", "conc"]


def summarize(request_files: list[str], contexts: dict[str, int]) -> pd.DataFrame:
    """One row per cell: medians over its ok requests, status, overlap, telemetry."""
    frames = []
    for path in request_files:
        parts = Path(path).parts  # results/cells/PAIR/LINK/MODEL/ctxC_cN.requests.parquet
        ctx, conc = Path(path).name.removesuffix(".requests.parquet")[3:].rsplit("_c", 1)
        frame = pq.read_table(path).to_pandas()
        frame = frame.assign(pair=parts[-4], link=parts[-3], model=parts[-2], ctx=ctx,
                             conc=int(conc))
        frames.append(frame)
    requests = pd.concat(frames, ignore_index=True)
    ok = requests[requests["status"] == "ok"]
    figures = ["prefill_tps", "decode_tps", "decode_ms_per_token", "ttft_ms",
               "server_prefill_tps", "server_decode_ms_per_token", "prompt_tokens",
               "rpc_bytes_per_token_a_to_b", "rpc_bytes_per_token_b_to_a"]
    medians = ok.groupby(SUMMARY_KEYS)[[f for f in figures if f in ok.columns]].median()
    cell = requests.groupby(SUMMARY_KEYS).agg(
        status=("cell_status", "first"),
        requests=("request_id", "count"),
        ok_requests=("status", lambda s: int((s == "ok").sum())),
        wall_ms=("cell_wall_ms", "first"),
        server_launch_id=("launch_id", "first"),
        link_fingerprint=("link_fingerprint", "first"),
        temp_before_c=("temp_before_c", "first"),
        temp_after_c=("temp_after_c", "first"),
    )
    summary = cell.join(medians).reset_index()
    summary["ctx_tokens"] = summary["ctx"].map(contexts)
    summary["temps"] = summary.apply(_temps_text, axis=1)
    summary["overlap"] = _overlaps(summary, requests)
    order = {label: i for i, label in enumerate(by_length(contexts))}
    summary = summary.sort_values(
        ["pair", "link", "model", "ctx", "conc"],
        key=lambda col: col.map(order) if col.name == "ctx" else col,
    )
    return summary.reset_index(drop=True)


def by_length(contexts: dict[str, int]) -> list[str]:
    """Context labels from shortest to longest prompt."""
    return sorted(contexts, key=contexts.get)


def _temps_text(row: pd.Series) -> str | None:
    if pd.isna(row["temp_before_c"]):
        return None
    return f"{row['temp_before_c']:.1f}->{row['temp_after_c']:.1f} C"


def _overlaps(summary: pd.DataFrame, requests: pd.DataFrame) -> pd.Series:
    singles = requests[(requests["conc"] == 1) & (requests["status"] == "ok")].assign(
        single_ms=lambda f: (f["t_last_ns"] - f["t_send_ns"]) / 1e6
    ).groupby(["pair", "link", "model", "ctx"])["single_ms"].median()
    values = []
    for row in summary.itertuples():
        single = singles.get((row.pair, row.link, row.model, row.ctx))
        ok = row.status == "ok"
        values.append(metrics.overlap(row.conc, single, row.wall_ms) if ok else None)
    return pd.Series(values, index=summary.index, dtype="float64")


def single_stream_decode(summary: pd.DataFrame, contexts: list[str]) -> pd.DataFrame:
    """The seed's section 2: decode tok/s by context at concurrency 1, per link and model,
    with the longest/shortest retention column (the seed's 100K/Short)."""
    one = summary[summary["conc"] == 1]
    table = one.pivot_table(index=["link", "model"], columns="ctx", values="decode_tps",
                            aggfunc="first")
    present = [c for c in contexts if c in table.columns]
    table = table[present]
    if len(present) > 1:
        first, last = present[0], present[-1]
        table[f"{last}/{first}"] = (table[last] / table[first] * 100).map(
            lambda v: f"{v:.0f}%" if np.isfinite(v) else "—"
        )
    for column in present:
        status = one.pivot_table(index=["link", "model"], columns="ctx", values="status",
                                 aggfunc="first")[column]
        table[column] = [
            f"{v:.1f}" if s == "ok" and np.isfinite(v) else f"❌ {s}"
            for v, s in zip(table[column], status.reindex(table.index), strict=True)
        ]
    return table.reset_index()


def to_markdown(frame: pd.DataFrame) -> str:
    columns = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join("—" if _missing(v) else str(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def write_table(frame: pd.DataFrame, stem: str | Path, title: str) -> None:
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(stem.with_suffix(".csv"), index=False)
    stem.with_suffix(".md").write_text(f"## {title}\n\n{to_markdown(frame)}")


def links_table(link_files: list[str]) -> pd.DataFrame:
    """The seed's Links table (Gbit/s, ms) plus request-response latency and what was
    negotiated and emulated."""
    links = pd.concat([pq.read_table(p).to_pandas() for p in link_files], ignore_index=True)

    def gbps(column: str) -> pd.Series:
        spread = links[f"{column}_max"] - links[f"{column}_min"]
        return [f"{v:.2f} ±{s / 2:.2f}" if s > 0 else f"{v:.2f}"
                for v, s in zip(links[column], spread, strict=True)]

    emulated = links["emulation_rate"].where(links["emulation_rate"] != "none", "")
    delay = links["emulation_delay"].where(links["emulation_delay"] != "none", "")
    return pd.DataFrame({
        "pair": links["pair"],
        "link": links["link"],
        "A→B": gbps("a_to_b_gbps"),
        "B→A": gbps("b_to_a_gbps"),
        "bidirectional total": gbps("bidir_gbps"),
        "idle ping (ms)": links["ping_ms"].round(3),
        "16 KB RR p50 (µs)": links["rr16k_p50_us"].round(0),
        "fixed overhead (µs)": links["rr_fixed_us"].round(0),
        "µs per KB": links["rr_us_per_kb"].round(2),
        "negotiated (Gbit/s)": links["negotiated_gbps"],
        "emulation": [" + ".join(x for x in (r, d) if x) or "none"
                      for r, d in zip(emulated, delay, strict=True)],
        "flags": links["flags"],
    })


def aggregate(request_files: list[str], link_files: list[str], contexts: dict[str, int],
              summary_out: str, tables_dir: str) -> pd.DataFrame:
    summary = summarize(request_files, contexts)
    parquet_io.write(summary, summary_out, {"cells": len(summary), "contexts": contexts})
    write_table(links_table(link_files), Path(tables_dir) / "links",
                "Links (bandwidth in Gbit/s: median ± half the spread over repeats)")
    write_table(single_stream_decode(summary, by_length(contexts)),
                Path(tables_dir) / "single_stream_decode",
                "Single-stream decode (tok/s) by context")
    return summary
