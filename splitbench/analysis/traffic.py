"""What a decoded token moves across the link, and what moving it costs.

The prediction (`predicted_bytes`, the one place it is computed), from the model's GGUF
header, where the launch put its layers (cells.layout: llama.cpp runs B's blocks as a
chain of RPC devices, each fed by A) and the cell's context:

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
and 8 B (SmolLM2: 196,616 against 196,608). vLLM's ranks exchange what its own split
needs (every layer's activations both ways for TP): no prediction for them.

The cost: the bytes above a link's burst allowance (the lab's tbf bucket; 0 on a wire)
at its measured throughput in their direction. A decode delta against the baseline link
is this term's difference plus round trips x the latency difference (comparison).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from splitbench import backends

# The backend whose traffic this module predicts: llama.cpp's RPC protocol.
RPC_BACKEND = "llamacpp"

F32 = 4
# llama.cpp's attention mask: f16, one row per decoded token, over the KV cells in use
# padded to KV_PAD (derived from the measured growth with context: 2 B x the padded
# cells, see the module docstring).
MASK_BYTES_PER_CELL = 2
KV_PAD = 256
TOLERANCE = 0.10  # measured vs predicted bytes: "agrees" within this share
DIRECTIONS = {"a_to_b": "A→B", "b_to_a": "B→A"}
LINK_FACTS = ["a_to_b_gbps", "b_to_a_gbps", "a_to_b_gbps_min", "a_to_b_gbps_max",
              "b_to_a_gbps_min", "b_to_a_gbps_max", "burst_bytes_a_to_b",
              "burst_bytes_b_to_a"]


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


def transfer_ms(size: float, burst: float, gbps: float) -> float:
    """Milliseconds to move `size` bytes: what exceeds the burst allowance, at `gbps`."""
    return max(size - (burst or 0), 0.0) * 8 / (gbps * 1e9) * 1e3


def with_predictions(cells: pd.DataFrame, baseline_link: str | None = None
                     ) -> pd.DataFrame:
    """cells (summary rows) with their predictions: `kv_cells` (the mask's width),
    `graph_uploads`, `geometry_bytes_a_to_b` (hidden state and mask: predicted_bytes
    without the overhead), the model's `step_overhead_bytes` with where it was measured
    (step_overhead), predicted_bytes_a_to_b / _b_to_a, and `predicted_slack_a_to_b`:
    what graph uploads other than the overhead's cell had may add (below). Only llama.cpp
    RPC's cells get them: other backends' are NaN.

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
    other = ~_rpc_split(cells)
    geometry = [(np.nan, np.nan) if v else predicted_bytes(*row, kv_cells=k)
                for row, k, v in zip(layout.itertuples(index=False), kv, other, strict=True)]
    out = cells.assign(kv_cells=kv, geometry_bytes_a_to_b=[g[0] for g in geometry],
                       graph_uploads=[graph_uploads(p, g) for p, g in
                                      zip(prompt, generated, strict=True)])
    overhead = step_overhead(out, baseline_link)
    out = out.merge(overhead, on=["pair", "model"], how="left")
    out.index = cells.index
    predicted = [(np.nan, np.nan) if v else
                 predicted_bytes(*row, kv_cells=k, overhead=o)
                 for row, k, o, v in zip(layout.itertuples(index=False), kv,
                                         out["step_overhead_bytes"], other, strict=True)]
    return out.assign(
        predicted_bytes_a_to_b=[p[0] for p in predicted],
        predicted_bytes_b_to_a=[p[1] for p in predicted],
        predicted_slack_a_to_b=out["step_overhead_bytes"] * (
            out["graph_uploads"] / out["overhead_uploads"] - 1))


def numbers(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column as numbers: NaN where a value is not one, or where the frame lacks the
    column (a file from before it was recorded)."""
    if column not in frame:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[column], errors="coerce")


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


def link_traffic(summary: pd.DataFrame, links: pd.DataFrame, contexts: list[str],
                 baseline_link: str | None = None) -> pd.DataFrame:
    """Per model, link and context at concurrency 1: where the layers sit, the bytes per
    decoded token measured each way against the prediction (with_predictions: A→B with
    its terms, the overhead measured on the baseline's shortest context; ⚠ beyond
    TOLERANCE), and what moving them takes on that link. vLLM's cells: no prediction."""
    one = summary[(summary["conc"] == 1) & (summary["status"] == "ok")]
    one = with_predictions(one, baseline_link).merge(_link_facts(links), on=["pair", "link"],
                                                     how="left")
    one = one.assign(ctx=pd.Categorical(one["ctx"], [c for c in contexts
                                                     if c in set(one["ctx"])]))
    one = one.sort_values(["pair", "model", "link", "ctx"]).reset_index(drop=True)
    other = ~_rpc_split(one)
    table = pd.DataFrame({
        "pair": one["pair"], "model": one["model"], "link": one["link"],
        "ctx": one["ctx"].astype(str),
        "on host B": [_layout_text(r) for _, r in one.iterrows()],
    })
    for way, arrow in DIRECTIONS.items():
        measured = numbers(one, f"rpc_bytes_per_token_{way}")
        table[f"{arrow} (B/token)"] = [_bytes(v) for v in measured]
        predicted, check = [], []
        for (_, row), m, v in zip(one.iterrows(), measured, other, strict=True):
            if v:
                predicted.append(f"no prediction for {_backend_name(row)}")
                check.append("—")
            elif way == "b_to_a":
                predicted.append(_bytes(row["predicted_bytes_b_to_a"]))
                check.append(_check(m, row["predicted_bytes_b_to_a"]))
            else:
                predicted.append(_a_to_b_text(row))
                check.append("— (the overhead is measured here)"
                             if f"{row['link']} {row['ctx']}" == row["overhead_from"] else
                             _check(m, row["predicted_bytes_a_to_b"],
                                    row["predicted_slack_a_to_b"],
                                    row["geometry_bytes_a_to_b"]))
        table[f"{arrow} predicted"] = predicted
        table[f"{arrow} check"] = check
    table["transfer (ms/token)"] = [_transfer_text(r) for _, r in one.iterrows()]
    if summary["pair"].nunique() <= 1:
        table = table.drop(columns="pair")
    return table


def _rpc_split(cells: pd.DataFrame) -> np.ndarray:
    """Which cells llama.cpp's RPC split served (the one split the byte prediction
    models); a cell measured before the backend column existed was llama.cpp's."""
    backend = cells.reindex(columns=["backend"]).iloc[:, 0]
    return (backend.isna() | backend.eq(RPC_BACKEND)).to_numpy()


def _backend_name(row: pd.Series) -> str:
    return backends.label(row.get("backend"))


def _layout_text(row: pd.Series) -> str:
    backend = row.get("backend")
    if backend is not None and not pd.isna(backend) and backend != RPC_BACKEND:
        return backends.layout_text(backend, row.get("split"))
    blocks, output = row.get("blocks_on_b"), row.get("output_on_b")
    if blocks is None or pd.isna(blocks):
        return "— (not in the launch record)"
    workers = int(row["rpc_workers"]) if pd.notna(row.get("rpc_workers")) else 1
    text = f"{int(blocks)} block{'s' if int(blocks) != 1 else ''}" + (
        " + output layer" if output else "")
    return text + (f" ({workers} workers)" if workers > 1 else "")


def _bytes(value: float) -> str:
    return f"{value:,.0f}" if np.isfinite(value) else "—"


def _a_to_b_text(row: pd.Series) -> str:
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


def _check(measured: float, predicted: float, slack: float = 0.0,
           floor: float = np.nan) -> str:
    """Measured against predicted: agrees within TOLERANCE of the range from the
    prediction to the prediction plus `slack` (graph uploads: with_predictions), else ⚠
    with the ratio. Without a prediction but with `floor` (what the geometry alone
    moves: A→B without the overhead), only a measurement below it is wrong."""
    if not np.isfinite(measured):
        return "—"
    if not np.isfinite(predicted):
        if np.isfinite(floor) and measured < floor * (1 - TOLERANCE):
            return f"⚠ {measured / floor:.2f}× the hidden state and mask: less than " \
                "the model must move"
        return "—"
    if predicted == 0:
        return "agrees (nothing crosses)" if measured == 0 else \
            f"⚠ {measured:,.0f} B where nothing should cross"
    slack = float(slack) if np.isfinite(slack) else 0.0
    low, high = min(predicted, predicted + slack), max(predicted, predicted + slack)
    gap = (measured - predicted) / predicted * 100
    uploads = f"; the graph re-sent as the KV cache grew: {slack:+,.0f} B allowed" \
        if slack else ""
    if low * (1 - TOLERANCE) <= measured <= high * (1 + TOLERANCE):
        return f"agrees ({gap:+.1f}%{uploads})"
    what = "more than the model and the protocol move" if measured > high else \
        "less than the model must move"
    return f"⚠ {measured / predicted:.2f}× the prediction: {what}{uploads}"


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
