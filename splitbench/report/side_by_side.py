"""The tables that put cells side by side: the same cell on each pair of machines
(`pairs_table`), one model shape under each backend's split (`backends_table`), and the
same cell and link cost in two runs (`two_runs_table`, `two_runs_costs_table`: what
`python -m splitbench compare` prints, from compare.run_compare)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from splitbench import backends
from splitbench.compare import pairs, run_compare, splits
from splitbench.contracts.slices import InterferenceLimits
from splitbench.report.tables import FLAG_MARK, flagged, ms_text, overlap_text, plus_minus
from splitbench.summary.cell_summary import SUMMARY_KEYS


def backends_table(summary: pd.DataFrame, contexts: list[str],
                   baseline_link: str | None = None,
                   mechanisms_table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Backends side by side (compare.splits.compare): one row per cell of each model
    shape measured with two or more splits, the splits next to each other: decode,
    prefill, TTFT and overlap with their ±, ❌ where the cell failed and ⚠ where it is
    flagged, and the bytes a decoded token moved each way; each model's decode verdict
    once, in the note below the table (`attrs["note"]`: backends_note). Without two
    splits of one shape, one row that says so."""
    comp = splits.compare(summary, contexts, baseline_link, mechanisms_table)
    if comp.empty:
        # Cells measured before the summary carried their split: the default backend's.
        default = backends.default_split()
        split = summary["split"] if "split" in summary else pd.Series(default, summary.index)
        measured = sorted({splits.split_name(s) for s in split.fillna(default)}) or ["none"]
        return pd.DataFrame({"backends": [
            f"no model shape measured with two or more splits in this run (splits: "
            f"{', '.join(measured)}): give one shape to llama.cpp and to vLLM (docs/backends.md)"]})
    rows = list(comp.itertuples(index=False))
    table: dict[str, pd.Series | list[str]] = {
        "shape": comp["model_shape"], "pair": comp["pair"], "ctx": comp["ctx"],
        "conc": comp["conc"], "link": comp["link"],
        "split": [splits.split_name(r.split) for r in rows], "model": comp["model"]}
    table["decode (ms/token)"] = [plus_minus(r.decode_ms_per_token, r.decode_ms_unc,
                                              r.status, ".2f", r.flags) for r in rows]
    table["prefill (tok/s)"] = [plus_minus(r.prefill_tps, r.prefill_tps_unc, r.status,
                                            ".0f", r.flags) for r in rows]
    table["TTFT (ms)"] = [plus_minus(r.ttft_ms, r.ttft_ms_unc, r.status, ms_text, r.flags)
                          for r in rows]
    table["overlap"] = ["— (one stream)" if r.conc == 1 else flagged(
        overlap_text(r.overlap if pairs.finite(r.overlap) else np.nan, r.status,
                      r.overlap_unc, r.prefill_share)
        if isinstance(r.status, str) else "—", r.flags) for r in rows]
    for way, arrow in (("a_to_b", "A→B"), ("b_to_a", "B→A")):
        table[f"bytes/token {arrow}"] = [
            f"{v:,.0f}" if r.status == "ok" and pairs.finite(v) else "—"
            for r, v in zip(rows, comp[f"rpc_bytes_per_token_{way}"], strict=True)]
    frame = pd.DataFrame(table).reset_index(drop=True)
    frame.attrs["note"] = backends_note(comp)
    return frame


def backends_note(comp: pd.DataFrame) -> str:
    """Markdown under the backends table: each model's decode verdict (the mechanisms
    table's first clause), said once for the models that share it, not on every row."""
    keys = ["pair", "model"] if comp["pair"].nunique() > 1 else ["model"]
    models = comp.drop_duplicates(keys)
    said: dict[str, list[str]] = {}
    for _, row in models.iterrows():
        said.setdefault(str(row["verdict"]), []).append("/".join(str(row[k]) for k in keys))
    lines = [f"- {', '.join(names)}: {verdict}" for verdict, names in said.items()]
    return "\nDecode verdict of each model (mechanisms table):\n\n" + "\n".join(lines) + "\n"


def _uncertainty_source(source: Any, samples: Any, status: Any) -> str:
    """Where a cell's ± comes from (cell_summary._uncertainty), with its sample count."""
    if status != "ok" or not isinstance(source, str):
        return "—"
    n = f"{samples:.0f} " if pairs.finite(samples) else ""
    return {"requests": f"{n}requests", "repeats": f"{n}repeats",
            "releases": f"{n}releases of the N requests",
            "tokens": "one pass's tokens (decode ± a lower bound; no prefill or "
                      "TTFT ±)"}.get(source, source)


def _link_figure(value: Any, unc: Any, flags: Any, spec: str) -> str:
    if not pairs.finite(value):
        return "— (not measured)"
    text = format(value, spec) + (f" ±{format(unc, spec)}" if pairs.finite(unc) else "")
    return flagged(text, flags)


def pairs_table(summary: pd.DataFrame, links: pd.DataFrame, contexts: list[str],
                baseline_link: str | None = None,
                interference_limits: InterferenceLimits | None = None) -> pd.DataFrame:
    """The pairs side by side (compare.pairs.compare): one row per pair and link of
    every model, context and concurrency that two or more pairs measured, with decode
    (tok/s and ms/token), prefill, TTFT, overlap and the cell's throughput over all
    streams, each with its ± (a 95% interval, and where it comes from), ❌
    where the cell failed and ⚠ where it is flagged; then the link's measured
    throughput each way (± half the spread over repeats) and request-response p50s,
    ⚠ where the link is flagged. With one pair, or no cell that two pairs share, one
    row that says so."""
    names = pairs.pairs_of(summary)
    if len(names) < 2:
        return pd.DataFrame({"pairs": [
            f"one pair in this run ({names[0]}): no other pair to compare it with"
            if names else "no cells in this run: no pairs to compare"]})
    comp = pairs.compare(summary, links, contexts, baseline_link, interference_limits)
    if comp.empty:
        return pd.DataFrame({"pairs": [
            f"{len(names)} pairs ({', '.join(names)}), but no model, context and "
            "concurrency measured on two or more of them"]})
    rows = comp.itertuples(index=False)
    table: dict[str, pd.Series] = {k: comp[k] for k in ["model", "ctx", "conc", "link", "pair"]}
    texts: dict[str, list[str]] = {name: [] for name in (
        "decode (tok/s)", "decode (ms/token)", "prefill (tok/s)", "TTFT (ms)", "overlap",
        "throughput (tok/s, all streams)", "± from", "A→B (Gbit/s)", "B→A (Gbit/s)",
        "RR 64 B p50 (µs)", "RR 16 KB p50 (µs)")}
    for r in rows:
        texts["decode (tok/s)"].append(plus_minus(r.decode_tps, r.decode_tps_unc, r.status,
                                                   ".1f", r.flags))
        texts["decode (ms/token)"].append(plus_minus(
            r.decode_ms_per_token, r.decode_ms_unc, r.status, ".2f", r.flags))
        texts["prefill (tok/s)"].append(plus_minus(r.prefill_tps, r.prefill_tps_unc,
                                                    r.status, ".0f", r.flags))
        texts["TTFT (ms)"].append(plus_minus(r.ttft_ms, r.ttft_ms_unc, r.status, ms_text,
                                              r.flags))
        texts["overlap"].append("— (one stream)" if r.conc == 1 else flagged(
            overlap_text(r.overlap if pairs.finite(r.overlap) else np.nan, r.status,
                          r.overlap_unc, r.prefill_share)
            if isinstance(r.status, str) else "—", r.flags))
        texts["throughput (tok/s, all streams)"].append(plus_minus(
            r.throughput_tps, r.throughput_tps_unc, r.status, ".1f", r.flags))
        texts["± from"].append(_uncertainty_source(r.uncertainty_from, r.samples, r.status))
        texts["A→B (Gbit/s)"].append(_link_figure(r.a_to_b_gbps, r.a_to_b_gbps_unc,
                                                  r.link_flags, ".2f"))
        texts["B→A (Gbit/s)"].append(_link_figure(r.b_to_a_gbps, r.b_to_a_gbps_unc,
                                                  r.link_flags, ".2f"))
        texts["RR 64 B p50 (µs)"].append(_link_figure(r.rr64_p50_us, np.nan, r.link_flags,
                                                      ".0f"))
        texts["RR 16 KB p50 (µs)"].append(_link_figure(r.rr16k_p50_us, np.nan,
                                                       r.link_flags, ".0f"))
    return pd.DataFrame({**table, **texts}).reset_index(drop=True)


def pairs_note(summary: pd.DataFrame, links: pd.DataFrame, contexts: list[str],
               baseline_link: str | None = None,
               interference_limits: InterferenceLimits | None = None) -> str:
    """Markdown under the pairs table: why each of its flagged cells and links is
    flagged."""
    if len(pairs.pairs_of(summary)) < 2:
        return ""
    comp = pairs.compare(summary, links, contexts, baseline_link, interference_limits)
    lines = []
    cells = comp[comp["flags"].map(lambda f: isinstance(f, str) and bool(f))]
    lines += [f"- cell {'/'.join(str(r[k]) for k in SUMMARY_KEYS)}: {r['flags']}"
              for _, r in cells.iterrows()]
    flagged = comp.drop_duplicates(["pair", "link"])
    flagged = flagged[flagged["link_flags"].map(lambda f: isinstance(f, str) and bool(f))]
    lines += [f"- link {r['pair']}/{r['link']}: {r['link_flags']}"
              for _, r in flagged.iterrows()]
    if not lines:
        return ""
    return f"\n{FLAG_MARK} flagged in this table:\n\n" + "\n".join(lines) + "\n"


def two_runs_costs_table(changed: pd.DataFrame) -> pd.DataFrame:
    """Each link's decode cost in two runs (run_compare.costs() after run_compare.flag())
    as a person reads it: each run's cost with its ±, the change with its ± and p-value,
    ⚠ only where it survives Holm's correction."""
    out = changed[["pair", "model", "link", "ctx"]].copy()
    for side in "ab":
        out[f"decode cost {side.upper()} (ms/token)"] = [
            _change(c, u, False, 2) for c, u in zip(changed[f"cost_{side}"],
                                                   changed[f"unc_{side}"], strict=True)]
    out["change"] = [_change(c, u, f, 2, p, lo) for c, u, f, p, lo in zip(
        changed["change"], changed["unc"], changed["flag"], changed["p"],
        changed["lower_bound"], strict=True)]
    out["compared (A; B)"] = [a if a == b else f"{a}; {b}" for a, b in zip(
        changed["compared_a"], changed["compared_b"], strict=True)]
    return out


def two_runs_table(compared: pd.DataFrame) -> pd.DataFrame:
    """The cells two runs both measured (run_compare.cells() after run_compare.flag()) as
    a person reads them: each figure's A, B and change with its ± and p-value, ⚠ only
    where the change survives Holm's correction (a change beyond its own ± alone is what
    chance gives one figure in twenty)."""
    out = compared[run_compare.KEYS].copy()
    for figure, _, title, places, _ in run_compare.FIGURES:
        out[f"{title} A"] = compared[f"{figure}_a"].map(lambda v, p=places: _fixed(v, p))
        out[f"{title} B"] = compared[f"{figure}_b"].map(lambda v, p=places: _fixed(v, p))
        out[f"{title} change"] = [
            _change(c, u, f, places, p, lo) for c, u, f, p, lo in zip(
                compared[f"{figure}_change"], compared[f"{figure}_unc"],
                compared[f"{figure}_flag"], compared[f"{figure}_p"],
                compared[f"{figure}_lower_bound"], strict=True)]
    failed = (compared["status_a"] != "ok") | (compared["status_b"] != "ok")
    out["status"] = [f"{a} → {b}" if bad else "⚠ flagged" if busy else "ok"
                     for a, b, bad, busy in zip(
                         compared["status_a"], compared["status_b"], failed,
                         compared["flagged"], strict=True)]
    return out


def _fixed(value: float, places: int) -> str:
    return "—" if not np.isfinite(value) else f"{value:.{places}f}"


def _change(change: float, unc: float, marked: Any, places: int, p: float = np.nan,
            lower: Any = False) -> str:
    """A change with its ± and p-value; a ± only a lower bound says so (and has no
    p-value: it is not tested)."""
    if not np.isfinite(change):
        return "—"
    text = f"{change:+.{places}f}" + (f" ±{unc:.{places}f}" if np.isfinite(unc) else
                                       " (no ±)")
    if np.isfinite(unc) and lower:
        text += " (± a lower bound)"
    elif np.isfinite(p):
        text += " (p<0.001)" if p < 0.001 else f" (p={p:.2g})"
    return f"⚠ {text}" if marked else text


def two_runs_line(compared: pd.DataFrame) -> str:
    """How many cells both runs measured, and how many either flagged (not tested)."""
    busy = int(compared["flagged"].sum())
    if busy and busy == len(compared):
        return (f"{len(compared)} cells in both runs, every one flagged in one run or the "
                "other: none is tested (the table marks each).")
    aside = (f"; {busy} cell{'s' if busy != 1 else ''} flagged in either run, not "
             "tested" if busy else "")
    return f"{len(compared)} cell{'s' if len(compared) != 1 else ''} in both runs{aside}."
