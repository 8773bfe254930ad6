"""What a decoded token moves across the link, and what moving it costs.

The prediction of the bytes is the backend's (`Backend.predict_traffic`: llama.cpp's
RPC split predicts them from the model's geometry, its split and the context,
backends/llamacpp/traffic_model.py; vLLM's ranks exchange what its own split needs,
every layer's activations both ways for TP, and it predicts none). `with_predictions`
asks each backend for its cells' and leaves the rest unknown.

The cost: the bytes above a link's burst allowance (the lab's tbf bucket; 0 on a wire)
at its measured throughput in their direction. A decode delta against the baseline link
is this term's difference plus round trips x the latency difference (comparison).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from splitbench import backends
from splitbench.contracts import registry
from splitbench.infra.parquet_io import numbers

TOLERANCE = 0.10  # measured vs predicted bytes: "agrees" within this share
DIRECTIONS = {"a_to_b": "A→B", "b_to_a": "B→A"}
LINK_FACTS = ["a_to_b_gbps", "b_to_a_gbps", "a_to_b_gbps_min", "a_to_b_gbps_max",
              "b_to_a_gbps_min", "b_to_a_gbps_max", "burst_bytes_a_to_b",
              "burst_bytes_b_to_a"]


def transfer_ms(size: float, burst: float, gbps: float) -> float:
    """Milliseconds to move `size` bytes: what exceeds the burst allowance, at `gbps`."""
    return max(size - (burst or 0), 0.0) * 8 / (gbps * 1e9) * 1e3


# The columns a backend's prediction adds to its cells (Backend.predict_traffic).
PREDICTED = ["kv_cells", "geometry_bytes_a_to_b", "graph_uploads", "step_overhead_bytes",
             "overhead_from", "overhead_uploads", "predicted_bytes_a_to_b",
             "predicted_bytes_b_to_a", "predicted_slack_a_to_b"]


def with_predictions(cells: pd.DataFrame, baseline_link: str | None = None
                     ) -> pd.DataFrame:
    """cells (summary rows) with the PREDICTED columns: each backend's prediction for
    its own cells (`Backend.predict_traffic`), NaN for a backend that makes none or is
    not registered here; `traffic_predicted` says which rows got one."""
    names = pd.Series([backends.name_of(row) for _, row in cells.iterrows()],
                      index=cells.index, dtype=object)
    parts = []
    for name, rows in cells.groupby(names, sort=False):
        predicted = (backends.get(name).predict_traffic(rows, baseline_link)
                     if name in registry.names() else None)
        parts.append(rows.assign(traffic_predicted=False) if predicted is None
                     else predicted.assign(traffic_predicted=True))
    if not parts:
        return cells.reindex(columns=[*cells.columns, *PREDICTED]).assign(
            traffic_predicted=False)
    out = pd.concat(parts).reindex(cells.index)
    return out.reindex(columns=[*cells.columns,
                                *[c for c in out.columns if c not in cells.columns],
                                *[c for c in PREDICTED if c not in out.columns]])


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
    other = ~one["traffic_predicted"].astype(bool)
    table = pd.DataFrame({
        "pair": one["pair"], "model": one["model"], "link": one["link"],
        "ctx": one["ctx"].astype(str),
        "on host B": [backends.layout_of(r) for _, r in one.iterrows()],
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
                predicted.append(backends.get(backends.name_of(row)).traffic_terms(row))
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


def _backend_name(row: pd.Series) -> str:
    return backends.label(row.get("backend"))


def _bytes(value: float) -> str:
    return f"{value:,.0f}" if np.isfinite(value) else "—"


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
