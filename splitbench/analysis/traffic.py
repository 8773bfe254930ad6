"""What a decoded token moves across the link, and what moving it costs.

The prediction, from the model's GGUF header and where the launch put its layers
(cells.layout: llama.cpp runs B's blocks as a chain of RPC devices, each fed by A):

A→B  the hidden state (n_embd x 4 B, f32) into each worker;
B→A  the hidden state back from each worker but the last, and from the last the logits
     (n_vocab x 4 B) when the output layer is on B, else its hidden state.

It leaves out the RPC protocol itself: a tensor descriptor with every command, the
attention mask (2 B per KV cell) and the whole graph again whenever it changes. B→A is
the logits almost alone (measured: SmolLM2 196,616 B against 196,608 predicted); A→B is
mostly protocol (SmolLM2 13.8 KB against a 2.3 KB hidden state), which the table says.

The cost: the bytes above a link's burst allowance (the lab's tbf bucket; 0 on a wire)
at its measured throughput in their direction. A decode delta against the baseline link
is this term's difference plus round trips x the latency difference (comparison).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

F32 = 4
TOLERANCE = 0.10  # measured vs predicted bytes: "agrees" within this share
DIRECTIONS = {"a_to_b": "A→B", "b_to_a": "B→A"}
LINK_FACTS = ["a_to_b_gbps", "b_to_a_gbps", "a_to_b_gbps_min", "a_to_b_gbps_max",
              "b_to_a_gbps_min", "b_to_a_gbps_max", "burst_bytes_a_to_b",
              "burst_bytes_b_to_a"]


def predicted_bytes(n_embd: Any, n_vocab: Any, blocks_on_b: Any, output_on_b: Any,
                    workers: Any) -> tuple[float, float]:
    """(A→B, B→A) bytes per decoded token that the model's geometry and the split make
    cross the link; NaN where any of them is unknown."""
    values = [n_embd, n_vocab, blocks_on_b, output_on_b, workers]
    if any(v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA
           for v in values):
        return np.nan, np.nan
    if not blocks_on_b and not output_on_b:
        return 0.0, 0.0  # everything on A: nothing crosses
    hidden = float(n_embd) * F32
    last = float(n_vocab) * F32 if output_on_b else hidden
    return hidden * int(workers), hidden * (int(workers) - 1) + last


def transfer_ms(size: float, burst: float, gbps: float) -> float:
    """Milliseconds to move `size` bytes: what exceeds the burst allowance, at `gbps`."""
    return max(size - (burst or 0), 0.0) * 8 / (gbps * 1e9) * 1e3


def with_predictions(cells: pd.DataFrame) -> pd.DataFrame:
    """cells (summary rows) with predicted_bytes_a_to_b / _b_to_a."""
    columns = ["model_n_embd", "model_n_vocab", "blocks_on_b", "output_on_b", "rpc_workers"]
    layout = cells.reindex(columns=columns).astype(object).where(
        cells.reindex(columns=columns).notna(), None)
    predicted = [predicted_bytes(*row) for row in layout.itertuples(index=False)]
    return cells.assign(predicted_bytes_a_to_b=[p[0] for p in predicted],
                        predicted_bytes_b_to_a=[p[1] for p in predicted])


def _link_facts(links: pd.DataFrame, suffix: str = "") -> pd.DataFrame:
    facts = links.reindex(columns=["pair", "link", *LINK_FACTS])
    return facts.rename(columns={c: c + suffix for c in LINK_FACTS})


def bandwidth_delta(rows: pd.DataFrame, links: pd.DataFrame) -> pd.DataFrame:
    """For rows with pair, link, baseline and the measured rpc_bytes_per_token_*: the
    decode time the link's bandwidth adds per token against the baseline link
    (`bandwidth_ms`), its uncertainty from the spread of each link's throughput
    (`bandwidth_unc_ms`, half the spread over repeats), and what crosses
    (`bandwidth_what`: the direction that costs most, its size and rate)."""
    facts = rows[["pair", "link", "baseline"]].merge(
        _link_facts(links), on=["pair", "link"], how="left").merge(
        _link_facts(links, "_base").rename(columns={"link": "baseline"}),
        on=["pair", "baseline"], how="left")
    facts.index = rows.index
    out = pd.DataFrame(index=rows.index, columns=["bandwidth_ms", "bandwidth_unc_ms",
                                                  "bandwidth_what"], dtype=object)
    for i in rows.index:
        total, variance, biggest = 0.0, 0.0, (0.0, None)
        for way, arrow in DIRECTIONS.items():
            size = pd.to_numeric(rows.at[i, f"rpc_bytes_per_token_{way}"], errors="coerce") \
                if f"rpc_bytes_per_token_{way}" in rows else np.nan
            link = [pd.to_numeric(facts.at[i, f"{way}_{k}"], errors="coerce")
                    for k in ("gbps", "gbps_min", "gbps_max")]
            base = [pd.to_numeric(facts.at[i, f"{way}_{k}_base"], errors="coerce")
                    for k in ("gbps", "gbps_min", "gbps_max")]
            if not (np.isfinite(size) and np.isfinite(link[0]) and np.isfinite(base[0])):
                total = np.nan
                break
            # The bytes within the link's burst cross at line speed, as on the baseline:
            # only the rest differs between the two.
            burst = np.nan_to_num(pd.to_numeric(facts.at[i, f"burst_bytes_{way}"],
                                                errors="coerce"))
            on_link = transfer_ms(size, burst, link[0])
            on_base = transfer_ms(size, burst, base[0])
            total += on_link - on_base
            # Relative uncertainty of a transfer time = that of the throughput.
            for ms, (mid, low, high) in ((on_link, link), (on_base, base)):
                rel = (high - low) / (2 * mid) if np.isfinite(high - low) else 0.0
                variance += (ms * rel) ** 2
            if on_link - on_base > biggest[0]:
                biggest = (on_link - on_base,
                           f"{arrow} {size / 1000:.1f} KB at {link[0]:.2f} Gbit/s")
        out.at[i, "bandwidth_ms"] = total
        out.at[i, "bandwidth_unc_ms"] = float(np.sqrt(variance)) if np.isfinite(total) \
            else np.nan
        out.at[i, "bandwidth_what"] = biggest[1]
    return out.astype({"bandwidth_ms": float, "bandwidth_unc_ms": float})


def link_traffic(summary: pd.DataFrame, links: pd.DataFrame,
                 contexts: list[str]) -> pd.DataFrame:
    """Per model, link and context at concurrency 1: where the layers sit, the bytes per
    decoded token measured each way against the prediction (⚠ beyond TOLERANCE, with
    what the rest is), and what moving them takes on that link."""
    one = summary[(summary["conc"] == 1) & (summary["status"] == "ok")]
    one = with_predictions(one).merge(_link_facts(links), on=["pair", "link"], how="left")
    one = one.assign(ctx=pd.Categorical(one["ctx"], [c for c in contexts
                                                     if c in set(one["ctx"])]))
    one = one.sort_values(["pair", "model", "link", "ctx"]).reset_index(drop=True)
    table = pd.DataFrame({
        "pair": one["pair"], "model": one["model"], "link": one["link"],
        "ctx": one["ctx"].astype(str),
        "on host B": [_layout_text(r) for _, r in one.iterrows()],
    })
    for way, arrow in DIRECTIONS.items():
        measured = pd.to_numeric(one.reindex(columns=[f"rpc_bytes_per_token_{way}"]).iloc[:, 0],
                                 errors="coerce")
        predicted = one[f"predicted_bytes_{way}"]
        table[f"{arrow} (B/token)"] = [_bytes(v) for v in measured]
        table[f"{arrow} predicted"] = [_bytes(v) for v in predicted]
        table[f"{arrow} check"] = [_check(m, p, way) for m, p in
                                   zip(measured, predicted, strict=True)]
    table["transfer (ms/token)"] = [_transfer_text(r) for _, r in one.iterrows()]
    if summary["pair"].nunique() <= 1:
        table = table.drop(columns="pair")
    return table


def _layout_text(row: pd.Series) -> str:
    blocks, output = row.get("blocks_on_b"), row.get("output_on_b")
    if blocks is None or pd.isna(blocks):
        return "— (not in the launch record)"
    workers = int(row["rpc_workers"]) if pd.notna(row.get("rpc_workers")) else 1
    text = f"{int(blocks)} block{'s' if int(blocks) != 1 else ''}" + (
        " + output layer" if output else "")
    return text + (f" ({workers} workers)" if workers > 1 else "")


def _bytes(value: float) -> str:
    return f"{value:,.0f}" if np.isfinite(value) else "—"


def _check(measured: float, predicted: float, way: str) -> str:
    if not (np.isfinite(measured) and np.isfinite(predicted)):
        return "—"
    if predicted == 0:
        return "agrees (nothing crosses)" if measured == 0 else \
            f"⚠ {measured:,.0f} B where nothing should cross"
    ratio = measured / predicted
    if abs(ratio - 1) <= TOLERANCE:
        return f"agrees ({(ratio - 1) * 100:+.1f}%)"
    what = "hidden state" if way == "a_to_b" else "prediction"
    rest = (": the rest is RPC overhead (tensor descriptors, attention mask, graph "
            "uploads)") if ratio > 1 else ": less than the model must move"
    return f"⚠ {ratio:.1f}× the {what}{rest}"


def _own_transfer(row: pd.Series) -> dict[str, float]:
    """A cell's transfer time per token each way on its own link (NaN where unknown)."""
    out = {}
    for way in DIRECTIONS:
        size = pd.to_numeric(row.get(f"rpc_bytes_per_token_{way}"), errors="coerce")
        gbps = pd.to_numeric(row.get(f"{way}_gbps"), errors="coerce")
        burst = np.nan_to_num(pd.to_numeric(row.get(f"burst_bytes_{way}"), errors="coerce"))
        out[way] = transfer_ms(size, burst, gbps) if np.isfinite(size) and \
            np.isfinite(gbps) else np.nan
    return out


def own_transfer_ms(cells: pd.DataFrame, links: pd.DataFrame) -> pd.Series:
    """Each cell's decoded token's transfer time on its own link, both ways (ms)."""
    facts = cells[["pair", "link"]].merge(_link_facts(links), on=["pair", "link"],
                                          how="left")
    facts.index = cells.index
    rows = pd.concat([cells.drop(columns=[c for c in LINK_FACTS if c in cells]),
                      facts[LINK_FACTS]], axis=1)
    return pd.Series([sum(_own_transfer(r).values()) for _, r in rows.iterrows()],
                     index=cells.index, dtype=float)


def _transfer_text(row: pd.Series) -> str:
    times = _own_transfer(row)
    if not all(np.isfinite(v) for v in times.values()):
        return "— (no throughput measured)"
    return " / ".join(f"{arrow} {times[way]:.3f}" for way, arrow in DIRECTIONS.items())
