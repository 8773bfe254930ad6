"""What llama.cpp's RPC split makes a decoded token move across the link, predicted
(`with_predictions`, the one place it is computed), from the model's GGUF header, where
the launch put its layers (cells.layout: llama.cpp runs B's blocks as a chain of RPC
devices, each fed by A) and the cell's context:

A→B  the hidden state (n_embd x 4 B, f32) into each worker; the attention mask into each
     worker that holds blocks (f16, 2 B per KV cell: one row over the KV cells in use at
     that step, which llama.cpp pads to 256: prompt + tokens so far, rounded up); and a
     per-step overhead of the RPC protocol (the graph's and tensors' descriptors), the
     same at every context, which the geometry does not give: it is measured once per
     model, as what the baseline link's shortest-context cell moved beyond the other two
     terms, and used for every other cell of that model;
B→A  the hidden state back from each worker but the last, and from the last the logits
     (n_vocab x 4 B) when the output layer is on B, else its hidden state.

Measured on this build (one worker, concurrency 1, 64 tokens): the 2-layer synthetic
(n_embd 64) 3,862 B A→B at 128 tokens, 13,590 at 5k and 67,862 at 32k: exactly 256
hidden + 2 x (256, 5,120, 32,256 padded KV cells) + 3,094 overhead. B→A is the logits
and 8 B (SmolLM2: 196,616 against 196,608). What the bytes cost on a link is
compare/traffic.py's, for every backend that predicts them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

F32 = 4
# llama.cpp's attention mask: f16, one row per decoded token, over the KV cells in use
# padded to KV_PAD (derived from the measured growth with context: 2 B x the padded
# cells, see the module docstring).
MASK_BYTES_PER_CELL = 2
KV_PAD = 256
def _unknown(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))


def _window(prompt_tokens: Any, generated_tokens: Any) -> np.ndarray:
    """The padded KV cells of each decode step whose bytes are counted (first token to
    last): the step that decodes token k + 1 holds prompt + k cells, padded to KV_PAD."""
    generated = 2 if _unknown(generated_tokens) else max(int(generated_tokens), 2)
    steps = np.arange(1, generated)
    return np.ceil((float(prompt_tokens) + steps) / KV_PAD) * KV_PAD


def mask_cells(prompt_tokens: Any, generated_tokens: Any) -> float:
    """The KV cells a decode step's attention mask covers, averaged over the counted
    decode steps (_window); NaN where the prompt is unknown."""
    return np.nan if _unknown(prompt_tokens) else float(
        np.mean(_window(prompt_tokens, generated_tokens)))


def graph_uploads(prompt_tokens: Any, generated_tokens: Any) -> float:
    """How often llama.cpp sends B the whole graph during the counted decode steps:
    once for the first (its graph differs from prefill's), and again whenever the padded
    KV size changes (a new graph). Measured: a 2000-token prompt, whose 64 tokens cross
    2,048 cells, moved 7,831 B A→B per token against 7,559 at 2,048 and 2,100 tokens
    with the mask's difference taken out (the 2-layer synthetic: one re-upload, about
    17 KB). NaN where the prompt is unknown."""
    return np.nan if _unknown(prompt_tokens) else float(
        len(np.unique(_window(prompt_tokens, generated_tokens))))


def predicted_bytes(n_embd: Any, n_vocab: Any, blocks_on_b: Any, output_on_b: Any,
                    workers: Any, kv_cells: Any = 0.0, overhead: Any = 0.0
                    ) -> tuple[float, float]:
    """(A→B, B→A) bytes per decoded token that the model's geometry, the split and the
    context make cross the link: `kv_cells` (mask_cells) the attention mask's width,
    `overhead` the per-step protocol bytes A→B (measured: `step_overhead`); NaN where
    any of the geometry is unknown, A→B NaN where kv_cells or overhead is."""
    if any(_unknown(v) for v in (n_embd, n_vocab, blocks_on_b, output_on_b, workers)):
        return np.nan, np.nan
    if not blocks_on_b and not output_on_b:
        return 0.0, 0.0  # everything on A: nothing crosses
    hidden = float(n_embd) * F32
    last = float(n_vocab) * F32 if output_on_b else hidden
    # Each worker that holds blocks gets the mask; one that holds only the output
    # layer has no attention.
    masks = min(int(workers), int(blocks_on_b))
    a_to_b = (np.nan if _unknown(kv_cells) or _unknown(overhead) else
              hidden * int(workers) + MASK_BYTES_PER_CELL * float(kv_cells) * masks
              + float(overhead))
    return a_to_b, hidden * (int(workers) - 1) + last


def with_predictions(cells: pd.DataFrame, baseline_link: str | None = None
                     ) -> pd.DataFrame:
    """cells (summary rows) with their predictions: `kv_cells` (the mask's width),
    `graph_uploads`, `geometry_bytes_a_to_b` (hidden state and mask: predicted_bytes
    without the overhead), the model's `step_overhead_bytes` with where it was measured
    (step_overhead), predicted_bytes_a_to_b / _b_to_a, and `predicted_slack_a_to_b`:
    what graph uploads other than the overhead's cell had may add (below). cells: this
    backend's, as `Backend.predict_traffic` is given them.

    The overhead O measured on a cell with u0 graph uploads is c + u0 g: a per-step
    constant c and each upload's share g, neither known alone. A cell with u uploads
    moves c + u g, between O (g = 0) and O u / u0 (c = 0): the prediction is O, and
    the slack O (u / u0 - 1) the most that the extra uploads can add (or, fewer, take
    away)."""
    columns = ["model_n_embd", "model_n_vocab", "blocks_on_b", "output_on_b", "rpc_workers"]
    layout = cells.reindex(columns=columns).astype(object).where(
        cells.reindex(columns=columns).notna(), None)
    # The prompt the server held in its KV cache: its own count, else the context's.
    prompt = numbers(cells, "prompt_tokens").fillna(numbers(cells, "ctx_tokens"))
    generated = numbers(cells, "generated_tokens")
    kv = [mask_cells(p, g) for p, g in zip(prompt, generated, strict=True)]
    geometry = [predicted_bytes(*row, kv_cells=k)
                for row, k in zip(layout.itertuples(index=False), kv, strict=True)]
    out = cells.assign(kv_cells=kv, geometry_bytes_a_to_b=[g[0] for g in geometry],
                       graph_uploads=[graph_uploads(p, g) for p, g in
                                      zip(prompt, generated, strict=True)])
    overhead = step_overhead(out, baseline_link)
    out = out.merge(overhead, on=["pair", "model"], how="left")
    out.index = cells.index
    predicted = [predicted_bytes(*row, kv_cells=k, overhead=o)
                 for row, k, o in zip(layout.itertuples(index=False), kv,
                                      out["step_overhead_bytes"], strict=True)]
    return out.assign(
        predicted_bytes_a_to_b=[p[0] for p in predicted],
        predicted_bytes_b_to_a=[p[1] for p in predicted],
        predicted_slack_a_to_b=out["step_overhead_bytes"] * (
            out["graph_uploads"] / out["overhead_uploads"] - 1))


def step_overhead(cells: pd.DataFrame, baseline_link: str | None = None) -> pd.DataFrame:
    """Per pair and model: the RPC protocol's bytes per decode step A→B beyond the hidden
    state and the mask (`step_overhead_bytes`: the graph's and the tensors' descriptors),
    measured on the baseline link's shortest-context ok cell at concurrency 1
    (`overhead_from`: its link and context; `overhead_uploads`: its graph uploads);
    the next context where that cell has no bytes measured (or fewer than the hidden
    state and mask), none where no cell of the baseline has. cells: with `geometry_bytes_a_to_b`
    and `graph_uploads` (with_predictions)."""
    one = cells[(cells["conc"] == 1) & (cells["status"] == "ok")]
    if baseline_link is not None:
        one = one[one["link"] == baseline_link]
    one = one.assign(rest=numbers(one, "rpc_bytes_per_token_a_to_b")
                     - one["geometry_bytes_a_to_b"], _len=numbers(one, "ctx_tokens"))
    # A cell that moved less than hidden state and mask gives no overhead (its check
    # says what is wrong with it).
    one = one[one["rest"] >= 0].sort_values(["_len", "link"], kind="stable")
    first = one.groupby(["pair", "model"], sort=False).head(1)
    return pd.DataFrame({"pair": first["pair"].astype(object),
                         "model": first["model"].astype(object),
                         "step_overhead_bytes": first["rest"].astype(float),
                         "overhead_from": [f"{r.link} {r.ctx}" for r in
                                           first.itertuples(index=False)],
                         "overhead_uploads": first["graph_uploads"].astype(float)})


def numbers(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column as numbers (NaN where a value is not one, or the column is missing)."""
    if column not in frame:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[column], errors="coerce")


def a_to_b_text(row: pd.Series) -> str:
    """The A→B prediction with its terms: "13,590 = 256 hidden + 10,240 mask (5,120 KV
    cells) + 3,094 overhead (measured on baseline short)"."""
    geometry = pd.to_numeric(row.get("geometry_bytes_a_to_b"), errors="coerce")
    if not np.isfinite(geometry):
        return "—"
    workers = int(row["rpc_workers"]) if pd.notna(row.get("rpc_workers")) else 1
    hidden = float(row["model_n_embd"]) * F32 * workers
    mask = geometry - hidden
    terms = f"{hidden:,.0f} hidden + " + (
        f"{mask:,.0f} mask ({row['kv_cells']:,.0f} KV cells)" if mask else
        "no mask (no blocks on B)")
    overhead = pd.to_numeric(row.get("step_overhead_bytes"), errors="coerce")
    if not np.isfinite(overhead):
        return f"{geometry:,.0f} = {terms}; no overhead measured (no bytes on the " \
            "baseline's shortest context)"
    return f"{geometry + overhead:,.0f} = {terms} + {overhead:,.0f} overhead (measured " \
        f"on {row['overhead_from']})"


def layout_text(row: pd.Series) -> str:
    """Where the launch put B's layers: "2 blocks + output layer (2 workers)"."""
    blocks, output = row.get("blocks_on_b"), row.get("output_on_b")
    if blocks is None or pd.isna(blocks):
        return "— (not in the launch record)"
    workers = int(row["rpc_workers"]) if pd.notna(row.get("rpc_workers")) else 1
    text = f"{int(blocks)} block{'s' if int(blocks) != 1 else ''}" + (
        " + output layer" if output else "")
    return text + (f" ({workers} workers)" if workers > 1 else "")
