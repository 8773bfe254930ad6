"""Backends side by side: one model shape split three ways across the same pair and
links, llama.cpp's RPC layer split against vLLM's tensor (TP=2) and pipeline (PP=2)
parallel.

Models are matched by shape (layers x width, heads, vocabulary: `cells.layout.shape`),
not by name: the same synthetic shape is one model per backend in the config (a GGUF for
llama.cpp, a Hugging Face directory with the same weights for vLLM). Each row is one
cell with its own uncertainty (a 95% interval) and flags, the bytes a decoded
token moved across the link each way (the kernel's counters of the connections between
the hosts), and its model's decode verdict from the mechanisms table. A difference
between two splits is everything that differs between the two servers on these CPUs,
not only what crosses the link: the table puts them next to each other, the mechanisms
table says what each one's decode pays per link.
"""

from __future__ import annotations

import pandas as pd

from splitbench import backends
from splitbench.summary import between_runs


def split_labels() -> dict[str, str]:
    """How each split is named, in the table's order (each backend's `split_labels`)."""
    return backends.split_labels()

# A cell is matched with the other splits of its shape on these.
SHARED = ["model_shape", "pair", "link", "ctx", "conc"]


def compared(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary's cells of every (shape, pair) that two or more splits measured
    (whatever their status: a failed cell is a result too), with `split` filled in for
    cells measured before the summary carried it (llama.cpp's)."""
    if summary.empty or "model_shape" not in summary:
        return summary.iloc[0:0]
    cells = summary[summary["model_shape"].notna()].copy()
    split = cells["split"] if "split" in cells else pd.Series(None, index=cells.index)
    cells["split"] = split.fillna(backends.default_split())
    count = cells.groupby(["model_shape", "pair"])["split"].transform("nunique")
    return cells[count >= 2]


def compare(summary: pd.DataFrame, contexts: list[str], baseline_link: str | None = None,
            mechanisms: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per cell of every shape two or more splits measured, ordered shape, pair,
    context (shortest first), concurrency, link (the baseline first) and split: its
    figures with their uncertainty (`*_unc`), status and flags, bytes per token, and
    its model's decode verdict (`verdict`, from `mechanisms`)."""
    cells = compared(between_runs.with_unc(summary))
    columns = ["model", "split", "status", "flags", "decode_ms_per_token", "decode_ms_unc",
               "prefill_tps", "prefill_tps_unc", "ttft_ms", "ttft_ms_unc", "overlap",
               "rpc_bytes_per_token_a_to_b", "rpc_bytes_per_token_b_to_a", "overlap_unc",
               "prefill_share"]
    cells = cells.reindex(columns=[*SHARED, *columns])
    for column in columns[4:]:
        cells[column] = pd.to_numeric(cells[column], errors="coerce")
    cells = cells.assign(verdict=_verdicts(cells, mechanisms))
    order = {c: i for i, c in enumerate(contexts)}
    split_order = {s: i for i, s in enumerate(split_labels())}
    cells = cells.assign(_ctx=cells["ctx"].map(order).fillna(len(order)),
                         _other=cells["link"] != baseline_link,
                         _split=cells["split"].map(split_order).fillna(len(split_order)))
    cells = cells.sort_values(["model_shape", "pair", "_ctx", "conc", "_other", "link",
                               "_split"], kind="stable")
    return cells.drop(columns=["_ctx", "_other", "_split"]).reset_index(drop=True)


def _verdicts(cells: pd.DataFrame, mechanisms: pd.DataFrame | None) -> list[str]:
    """Each cell's model's decode verdict (its pair's, where the table has pairs)."""
    if mechanisms is None or mechanisms.empty or "verdict" not in mechanisms:
        return ["—"] * len(cells)
    decode = mechanisms[mechanisms["mechanism"] == "decode"]
    keyed = "pair" in decode
    # The verdict's first clause: what the model's decode pays for (the rest, per link
    # and term, stands in the mechanisms table).
    found = {((r["pair"] if keyed else None), r["model"]): str(r["verdict"]).split("; ")[0]
             for _, r in decode.iterrows()}
    return [found.get(((p if keyed else None), m), "—")
            for p, m in zip(cells["pair"], cells["model"], strict=True)]


def split_name(split: str) -> str:
    return split_labels().get(split, split)
