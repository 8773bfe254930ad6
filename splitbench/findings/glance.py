"""The findings' first lines, as one table: per model and link, what the link costs
decode (ms/token) and prefill (%) against the baseline at each context, with their ±,
and why (the decode cost predicted from the link's measured latency, the model's round
trips per token and its bandwidth term). Read from the run's link comparison
(compare.comparison.run_comparison); the sentences below it say the rest."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from splitbench.compare import comparison
from splitbench.contracts.marks import FLAG_MARK
from splitbench.findings.text import COMPARISON, MECHANISMS, as_number, pm_text
from splitbench.infra.tables_io import to_markdown

TITLE = "At a glance"
NOTE = ("Δ = the link's single stream less the baseline's; ± a 95% interval (a ± that "
        f"spans 0: not resolvable; {FLAG_MARK}: a flagged cell). Why: the decode cost "
        "predicted from the round trips per token × the link's extra latency, plus its "
        f"bandwidth term, and whether the measurement agrees. → {COMPARISON.markdown()}, "
        f"{MECHANISMS.markdown()}")


def figures(comp: pd.DataFrame, contexts: Sequence[str]) -> list[dict[str, Any]]:
    """One record per pair, model, link and context of the comparison: the decode and
    prefill deltas with their ±, whether the cells were ok and flagged, and the
    prediction's parts (findings.json's `glance`)."""
    if comp.empty:
        return []
    order = {c: i for i, c in enumerate(contexts)}
    rows = comp.assign(_order=comp["ctx"].map(order)).sort_values(
        ["pair", "model", "link", "_order"], kind="stable")
    out = []
    for _, r in rows.iterrows():
        out.append({
            "pair": r["pair"], "model": r["model"], "link": r["link"], "ctx": r["ctx"],
            "ok": r["status"] == "ok" and r["status_base"] == "ok",
            "flagged": any(isinstance(r.get(c), str) and bool(r.get(c))
                           for c in ("flags", "flags_base")),
            **{name: as_number(r.get(name)) for name in (
                "decode_delta_ms", "decode_delta_unc_ms", "prefill_change_pct",
                "prefill_change_unc_pct", "round_trips", "latency_delta_us",
                "predicted_latency_ms", "predicted_bandwidth_ms",
                "predicted_decode_delta_ms", "predicted_decode_delta_unc_ms")}})
    return out


def table(records: list[dict[str, Any]], contexts: Sequence[str]) -> pd.DataFrame:
    """The records as the page shows them: a row per model and link (the pair too where
    there are several), decode and prefill per context, and why at the first context."""
    if not records:
        return pd.DataFrame()
    frame = pd.DataFrame(records)
    shown = [c for c in contexts if c in set(frame["ctx"])]
    several = frame["pair"].nunique() > 1
    rows = []
    for (pair, model, link), mine in frame.groupby(["pair", "model", "link"], sort=False):
        by_ctx = {r["ctx"]: r for r in mine.to_dict("records")}
        row = {"model": f"{model} on {pair}" if several else model, "link": link}
        for ctx in shown:
            r = by_ctx.get(ctx)
            row[f"decode Δ ms/token, {ctx}"] = _figure(r, "decode_delta_ms", "ms")
        for ctx in shown:
            r = by_ctx.get(ctx)
            row[f"prefill Δ, {ctx}"] = _figure(r, "prefill_change_pct", "pct")
        first = next((by_ctx[c] for c in shown if c in by_ctx and by_ctx[c]["ok"]), None)
        row["why (its first context)"] = f"{first['ctx']}: {_why(first)}" if first else "—"
        rows.append(row)
    return pd.DataFrame(rows)


def markdown(records: list[dict[str, Any]], contexts: Sequence[str]) -> str:
    """The table under its heading, with its note; "" where nothing was compared."""
    frame = table(records, contexts)
    if frame.empty:
        return ""
    return f"### {TITLE}\n\n{to_markdown(frame)}\n{NOTE}"


def _figure(r: dict[str, Any] | None, column: str, fmt: str) -> str:
    if r is None:
        return "—"
    if not r["ok"]:
        return "✗"
    value, unc = r[column], r[column.replace("_ms", "_unc_ms").replace("_pct", "_unc_pct")]
    if not np.isfinite(value):
        return "—"
    return pm_text(value, unc, fmt) + (f" {FLAG_MARK}" if r["flagged"] else "")


def _why(r: dict[str, Any] | None) -> str:
    """"1.02 round trips × +83 µs, bandwidth +0.00: +0.08 ±0.05 predicted, agrees"."""
    if r is None or not np.isfinite(r["predicted_decode_delta_ms"]):
        return "— (no latency or round trips measured)"
    parts = []
    if np.isfinite(r["round_trips"]) and np.isfinite(r["latency_delta_us"]):
        parts.append(f"{r['round_trips']:.2f} round trips × {r['latency_delta_us']:+.0f} µs")
    bandwidth = r["predicted_bandwidth_ms"]
    if np.isfinite(bandwidth) and abs(bandwidth) >= 0.005:
        parts.append(f"bandwidth {bandwidth:+.2f} ms")
    predicted = pm_text(r["predicted_decode_delta_ms"], r["predicted_decode_delta_unc_ms"])
    verdict = comparison.agrees(r["decode_delta_ms"], r["decode_delta_unc_ms"],
                                r["predicted_decode_delta_ms"],
                                r["predicted_decode_delta_unc_ms"])
    said = {True: "agrees", False: f"{FLAG_MARK} disagrees", None: "not judged"}[verdict]
    return f"{', '.join(parts) or 'latency'}: {predicted} predicted, {said}"
