"""The tables a person reads, rendered from the summary: the marks every table uses
and the tables of cells and links.

Each table function takes the summary (one row per cell; `summary.cell_summary`) and
returns a DataFrame that `infra.tables_io.write_table` renders; the tables that put
pairs and backends side by side are `report.side_by_side`'s, and `report.aggregate`
builds the summary and writes them all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from splitbench.compare import comparison, pairs
from splitbench.contracts import marks
from splitbench.contracts.slices import InterferenceLimits
from splitbench.findings.text import fixed
from splitbench.summary.cell_summary import (
    SUMMARY_KEYS,
    ctx_sorted,
    link_flags,
)
from splitbench.summary.releases import OVERLAP_MAX, OVERLAP_MIN, overlap_flag, overlap_outside

# Marks a figure measured under interference or with tokens that share a timestamp,
# and figures no setup can give.
FLAG_MARK = marks.FLAG_MARK
# Marks a failed cell: a plain glyph that DejaVu Sans has (a colour-emoji mark such as
# U+274C shows as an empty box in a browser without an emoji font).
FAIL_MARK = "\u2717"


# The seed's names for failure modes (its section 3): 400 is the context wall, 500 the
# overflow error.
FAILURE_LABEL = {"load": "load", "crash": "crash", "overflow": "500", "ctx_wall": "400",
                 "timeout": "timeout", "error": "error"}


FAILURE_AT = {"load": "does not load", "crash": "crashes", "overflow": "500",
              "ctx_wall": "400", "timeout": "times out", "error": "fails"}


def status_text(status: Any) -> str:
    """A failed cell as the seed writes it ("❌ 400", "❌ crash", with FAIL_MARK for
    its mark); "—" for no cell."""
    if not isinstance(status, str):
        return "—"
    return f"{FAIL_MARK} {FAILURE_LABEL.get(status, status)}"


def _cell_text(value: Any, status: Any, spec: str | Callable[[float], str]) -> str:
    """A figure where the cell is ok, its failure where it is not, "—" where missing."""
    if not isinstance(status, str):
        return "—"
    if status != "ok":
        return status_text(status)
    if value is None or not np.isfinite(value):
        return "—"
    return spec(value) if callable(spec) else format(value, spec)


def _row_keys(summary: pd.DataFrame) -> list[str]:
    """Row labels of per-link tables; the pair only where there are several."""
    return (["pair"] if summary["pair"].nunique() > 1 else []) + ["model", "link"]


def _by_context(summary: pd.DataFrame, contexts: Sequence[str], column: str,
                spec: str | Callable[[float], str]) -> pd.DataFrame:
    """Concurrency-1 cells as text, one row per model and link, one column per context."""
    one = summary[summary["conc"] == 1]
    keys = _row_keys(summary)
    flags = one["flags"] if "flags" in one else pd.Series(None, index=one.index)
    text = one.assign(text=[flagged(_cell_text(v, s, spec), f) for v, s, f in
                            zip(one[column], one["status"], flags, strict=True)])
    table = text.pivot(index=keys, columns="ctx", values="text")
    return table.reindex(columns=[c for c in contexts if c in table.columns]).fillna("—")


def flagged(text: str, flags: Any) -> str:
    """A cell's text with FLAG_MARK when it was measured under interference (or its
    tokens share timestamps): the reason is in the summary's `flags`."""
    return f"{text} {FLAG_MARK}" if isinstance(flags, str) and flags else text


def _ok_values(summary: pd.DataFrame, column: str, index: list[str]) -> pd.DataFrame:
    """Concurrency-1 figures of ok cells, wide by context (NaN elsewhere)."""
    one = summary[summary["conc"] == 1]
    return one.assign(value=one[column].where(one["status"] == "ok")).pivot(
        index=index, columns="ctx", values="value")


def ms_text(value: float) -> str:
    return f"{value:.1f}" if abs(value) < 100 else f"{value:.0f}"


def single_stream_decode(summary: pd.DataFrame, contexts: list[str]) -> pd.DataFrame:
    """The seed's section 2: decode tok/s by context at concurrency 1, per model and link,
    with the longest/shortest retention column (the seed's 100K/Short)."""
    table = _by_context(summary, contexts, "decode_tps", ".1f")
    present = list(table.columns)
    if len(present) > 1:
        first, last = present[0], present[-1]
        values = _ok_values(summary, "decode_tps", _row_keys(summary)).reindex(table.index)
        ratio = values[last] / values[first] * 100
        table[f"{last}/{first}"] = ratio.map(lambda v: f"{v:.0f}%" if np.isfinite(v) else "—")
    return table.reset_index().rename_axis(columns=None)


def single_stream_prefill(summary: pd.DataFrame, contexts: list[str]) -> pd.DataFrame:
    """The seed's section 2: prefill tok/s (prompt tokens / TTFT) by context at
    concurrency 1."""
    return _by_context(summary, contexts, "prefill_tps", ".0f").reset_index().rename_axis(
        columns=None)


def ttft_table(summary: pd.DataFrame, contexts: list[str]) -> pd.DataFrame:
    """TTFT against prompt size at concurrency 1, next to what the server's own prefill
    rate predicts (the seed: TTFT ~ prompt / prefill, 118 s predicted, 120 s measured);
    the rest is HTTP, the first decode step and the link."""
    one = ctx_sorted(summary[summary["conc"] == 1], _row_keys(summary) + ["ctx"], contexts)
    figures = ["prompt_tokens", "ctx_tokens", "ttft_ms", "prefill_tps", "server_prefill_tps"]
    one = one.assign(**{f: pd.to_numeric(one.get(f), errors="coerce") for f in figures})
    prompt = one["prompt_tokens"].fillna(one["ctx_tokens"])
    compute_ms = one["prompt_tokens"] / one["server_prefill_tps"] * 1000
    columns: dict[str, pd.Series | list[str]] = {
        k: one[k] for k in _row_keys(summary) + ["ctx"]}
    columns["prompt tokens"] = prompt.map(lambda v: f"{v:.0f}" if np.isfinite(v) else "—")
    for title, values, spec in [
        ("TTFT (ms)", one["ttft_ms"], ms_text),
        ("prefill (tok/s)", one["prefill_tps"], ".0f"),
        ("server prefill (tok/s)", one["server_prefill_tps"], ".0f"),
        ("prompt ÷ server prefill (ms)", compute_ms, ms_text),
        ("TTFT beyond that (ms)", one["ttft_ms"] - compute_ms, ms_text),
    ]:
        columns[title] = [_cell_text(v, s, spec)
                          for v, s in zip(values, one["status"], strict=True)]
    return pd.DataFrame(columns).reset_index(drop=True)


def _delta_text(value: float, unc: float, resolvable: Any, lower_bound: Any, status: Any,
                status_base: Any, spec: str, unit: str = "") -> str:
    if not isinstance(status_base, str):
        return "— (no baseline cell)"
    if status != "ok":
        return status_text(status)
    if status_base != "ok":
        return f"baseline {status_text(status_base)}"
    if not np.isfinite(value):
        return "—"
    text = format(value, "+" + spec) + unit
    if np.isfinite(unc):
        text += f" ±{format(unc, spec)}{unit}"
    if resolvable is False:
        return f"not resolvable ({text})"
    if np.isfinite(unc) and lower_bound is True:
        text += " (± a lower bound)"
    return text


def link_comparison(summary: pd.DataFrame, comp: pd.DataFrame, contexts: list[str]
                    ) -> pd.DataFrame:
    """The seed's table 1, one row per model, link and context: prefill relative change
    (%) and decode delta ms/token against the baseline link at concurrency 1, how they
    were compared (`comp`: the run's comparison, comparison.run_comparison), and, where
    its rows carry a prediction, the decode difference predicted from the links'
    measured latency and whether the measurement agrees. A difference that no link can
    have (faster than the baseline beyond its uncertainty) or that disagrees with the
    prediction is marked with ⚠."""
    keys = _row_keys(summary) + ["ctx"]
    comp = ctx_sorted(comp, keys, contexts).reset_index(drop=True)
    predicted = comp if PREDICTED in comp and len(comp) else None
    prefill, decode, expected, verdicts = [], [], [], []
    for i, row in comp.iterrows():
        prefill.append(_delta_text(row["prefill_change_pct"], row["prefill_change_unc_pct"],
                                   _bool(row["prefill_resolvable"]),
                                   _bool(row["prefill_lower_bound"]), row["status"],
                                   row["status_base"], ".0f", "%"))
        text = _delta_text(row["decode_delta_ms"], row["decode_delta_unc_ms"],
                           _bool(row["decode_resolvable"]), _bool(row["decode_lower_bound"]),
                           row["status"], row["status_base"], ".2f")
        if _bool(row["decode_resolvable"]) and row["decode_delta_ms"] < 0:
            text += f" {FLAG_MARK} faster than the baseline: no link can be"
        base_flagged = isinstance(row.get("flags_base"), str) and not row["compared"].startswith(
            "paired")  # a paired cell's baseline is the one measured alongside, not this
        if isinstance(row["flags"], str) or base_flagged:
            text += f" {FLAG_MARK} flagged (see the note)"
        decode.append(text)
        guess = predicted.loc[i] if predicted is not None else None
        expected.append(_prediction_text(guess))
        verdicts.append(_agreement(row, guess))
    table = pd.DataFrame({
        **{k: comp[k] for k in keys},
        "baseline": comp["baseline"],
        "compared": comp["compared"],
        "prefill base (tok/s)": _texts(comp["prefill_tps_base"], comp["status_base"], ".0f"),
        "prefill (tok/s)": _texts(comp["prefill_tps"], comp["status"], ".0f"),
        "prefill Δ": prefill,
        "decode base (ms/token)": _texts(comp["decode_ms_per_token_base"],
                                         comp["status_base"], ".2f"),
        "decode (ms/token)": _texts(comp["decode_ms_per_token"], comp["status"], ".2f"),
        "decode Δ (ms/token)": decode,
    })
    if predicted is not None:
        table["predicted Δ (ms/token)"] = expected
        table["measured vs predicted"] = verdicts
    return table


# The column a comparison row's prediction is in (comparison.predicted_decode_delta).
PREDICTED = "predicted_decode_delta_ms"


def _prediction_text(guess: pd.Series | None) -> str:
    if guess is None or not np.isfinite(guess["predicted_decode_delta_ms"]):
        return "—"
    text = f"{guess['predicted_decode_delta_ms']:+.2f}"
    unc = guess["predicted_decode_delta_unc_ms"]
    text += f" ±{unc:.2f}" if np.isfinite(unc) else ""
    parts = guess.get("predicted_latency_ms"), guess.get("predicted_bandwidth_ms")
    if all(p is not None and np.isfinite(p) for p in parts):
        text += f" (latency {parts[0]:+.2f}, bandwidth {parts[1]:+.2f})"
    elif parts[1] is not None and not np.isfinite(parts[1]):
        text += " (latency only: the bandwidth term is unknown)"
    return text


def _agreement(row: pd.Series, guess: pd.Series | None) -> str:
    """Whether the measured decode difference agrees with the prediction within their
    combined uncertainty; what is missing when it cannot be judged."""
    if guess is None or not np.isfinite(guess["predicted_decode_delta_ms"]):
        return "— (no latency or round-trip measurement)"
    if row["status"] != "ok" or row["status_base"] != "ok" or \
            not np.isfinite(row["decode_delta_ms"]):
        return "—"
    measured, unc = row["decode_delta_ms"], row["decode_delta_unc_ms"]
    if not np.isfinite(unc):
        return "— (the measurement has no uncertainty)"
    gap = measured - guess["predicted_decode_delta_ms"]
    predicted_unc = guess["predicted_decode_delta_unc_ms"]
    allowed = comparison.prediction_allowance(unc, predicted_unc)
    notes = [n for n, on in (("± a lower bound", _bool(row["decode_lower_bound"])),
                             ("the prediction's ± unknown", not np.isfinite(predicted_unc)))
             if on]
    suffix = f" ({'; '.join(notes)})" if notes else ""
    if abs(gap) <= allowed:
        return f"agrees ({gap:+.2f} within ±{allowed:.2f}){suffix}"
    host_a = comparison.host_a_change(guess)
    beside = (f"; host A's own time per token {host_a[0] / 1000:+.2f} "
              f"±{host_a[1] / 1000:.2f}" if host_a else "")
    return f"{FLAG_MARK} disagrees by {gap:+.2f} (more than ±{allowed:.2f}){suffix}{beside}"


def _texts(values: pd.Series, statuses: pd.Series, spec: str) -> list[str]:
    return [_cell_text(v, s, spec) for v, s in zip(values, statuses, strict=True)]


def _bool(value: Any) -> bool | None:
    return None if value is pd.NA or value is None else bool(value)


def concurrency_boundary(summary: pd.DataFrame, contexts: list[str]) -> pd.DataFrame:
    """The seed's section 3: per model, link and context, the highest concurrency level up
    to which every level is ok, with the failure mode at the next level in parentheses
    ("2 (crashes at 4)", "2 (500 at 4)", "1 (fails at 2)"); "❌ 400" where even one
    stream fails."""
    levels = sorted(summary["conc"].unique())
    keys = _row_keys(summary)
    statuses = summary.pivot(index=keys + ["ctx"], columns="conc", values="status")
    statuses = statuses.reindex(columns=levels)
    text = pd.Series([_boundary(list(row), levels) for row in statuses.itertuples(index=False)],
                     index=statuses.index)
    return _wide_by_context(text, contexts)


def _boundary(statuses: list[Any], levels: list[int]) -> str:
    if not levels or statuses[0] != "ok":
        return status_text(statuses[0]) if levels else "—"
    top = levels[0]
    for level, status in zip(levels[1:], statuses[1:], strict=True):
        if not isinstance(status, str):
            break  # next level not measured: the boundary is as far as we know
        if status != "ok":
            return f"{top} ({FAILURE_AT.get(status, status)} at {level})"
        top = level
    return str(top)


def _wide_by_context(text: pd.Series, contexts: Sequence[str]) -> pd.DataFrame:
    table = text.unstack("ctx")
    table = table.reindex(columns=[c for c in contexts if c in table.columns]).fillna("—")
    return table.reset_index().rename_axis(columns=None)


def overlap_table(summary: pd.DataFrame, contexts: list[str]) -> pd.DataFrame:
    """The seed's true concurrency ratio per model, link and context, one figure per
    concurrency level above 1 ("2-way / 4-way"), each with its ± where the cell released
    its requests more than once ("0.81 ±0.05"), ⚠ where it is impossible
    (`overlap_flag`) or the cell is flagged."""
    levels = sorted(c for c in summary["conc"].unique() if c > 1)
    keys = _row_keys(summary)
    if not levels:
        return pd.DataFrame(columns=keys)
    many = _with_overlap_columns(summary[summary["conc"] > 1])
    text = many.assign(text=[flagged(overlap_text(v, s, u, p, lb is True), f)
                             for v, s, u, p, lb, f in
                             zip(many["overlap"], many["status"], many["overlap_unc"],
                                 many["prefill_share"], many["overlap_unc_lower_bound"],
                                 many["flags"], strict=True)])
    wide = text.pivot(index=keys + ["ctx"], columns="conc", values="text")
    joined = wide.reindex(columns=levels).fillna("—").agg(" / ".join, axis=1)
    return _wide_by_context(joined, contexts)


def _with_overlap_columns(cells: pd.DataFrame) -> pd.DataFrame:
    """Cells with every column the overlap texts read (missing ones NaN: summaries of
    runs before cells released more than once have no ± and no prefill share)."""
    return cells.reindex(columns=list(dict.fromkeys(
        [*cells.columns, "overlap", "overlap_unc", "overlap_unc_lower_bound",
         "prefill_share", "flags"])))


def overlap_note(summary: pd.DataFrame) -> str:
    """Markdown under the overlap table: why each ⚠ overlap is impossible, and which
    overlaps are not resolvable from their neighbours (two concurrency levels of one
    link and context, or two links at one context and level, whose difference lies
    within its ±, the two ± combined in quadrature)."""
    many = _with_overlap_columns(summary[summary["conc"] > 1])
    label_keys = [k for k in _row_keys(summary) if k != "link"]
    lines, outside = [], []
    for r in many.itertuples(index=False):
        where = "/".join(str(getattr(r, k)) for k in SUMMARY_KEYS)
        reason = overlap_flag(r.overlap, r.overlap_unc, r.prefill_share)
        if reason:
            lines.append(f"- {FLAG_MARK} {where}: {reason}")
        elif explained := overlap_outside(r.overlap, r.overlap_unc, r.prefill_share):
            outside.append(f"- {OUTSIDE_MARK} {where}: {explained}")
    known = many[many["overlap"].map(pairs.finite) & many["overlap_unc"].map(pairs.finite)]

    def close(a: pd.Series, b: pd.Series) -> bool:
        return abs(a["overlap"] - b["overlap"]) <= np.hypot(a["overlap_unc"], b["overlap_unc"])

    def prefix(row: pd.Series) -> str:
        return "".join(f"{row[k]} " for k in label_keys)

    # Per link and pair of adjacent levels, the contexts where they are not resolvable:
    # "synth 5gbe 2-way ~ 4-way at short, 5k".
    near_levels: dict[str, list[str]] = {}
    for _, cell in known.groupby([*label_keys, "link", "ctx"], sort=False):
        cell = cell.sort_values("conc")
        for (_, a), (_, b) in zip(cell.iterrows(), cell.iloc[1:].iterrows(), strict=False):
            if close(a, b):
                near_levels.setdefault(f"{prefix(a)}{a['link']} {a['conc']}-way ~ "
                                       f"{b['conc']}-way", []).append(str(a["ctx"]))
    levels = [f"{what} at {', '.join(ctxs)}" for what, ctxs in near_levels.items()]
    links = []
    for _, level in known.groupby([*label_keys, "ctx", "conc"], sort=False):
        rows = [r for _, r in level.sort_values("link").iterrows()]
        if len(rows) < 2:
            continue
        pairs_ = [(a, b) for i, a in enumerate(rows) for b in rows[i + 1:]]
        near = [(a, b) for a, b in pairs_ if close(a, b)]
        if not near:
            continue
        head = f"{prefix(rows[0])}{rows[0]['ctx']} {rows[0]['conc']}-way: "
        if len(near) == len(pairs_):
            links.append(head + f"all {len(rows)} links ("
                         + ", ".join(r["link"] for r in rows) + ")")
        else:
            links.append(head + ", ".join(f"{a['link']} ~ {b['link']}" for a, b in near))
    out = ""
    if lines:
        out += f"\n{FLAG_MARK} impossible overlaps in this table:\n\n" + "\n".join(lines) + "\n"
    if outside:
        out += (f"\n{OUTSIDE_MARK} outside [{OVERLAP_MIN:g}, {OVERLAP_MAX:g}], and why that "
                "is no fault:\n\n" + "\n".join(outside) + "\n")
    if levels or links:
        out += ("\nNot resolvable (the two overlaps differ by less than their ± combined):"
                "\n\n")
        if levels:
            out += "- levels of one link: " + "; ".join(levels) + "\n"
        if links:
            out += "- links at one level: " + "; ".join(links) + "\n"
    return out


def overlap_levels(summary: pd.DataFrame) -> str:
    """"2-way / 4-way" for the concurrency levels the overlap table shows."""
    return " / ".join(f"{c}-way" for c in sorted(summary["conc"].unique()) if c > 1)


# Marks an overlap's ± that is a lower bound: a cell of one release, whose ± is the
# single stream's part alone.
ONE_RELEASE_MARK = "†"
# Marks an overlap outside [OVERLAP_MIN, OVERLAP_MAX] that is no fault; the note under
# the overlap table says why for each (overlap_outside).
OUTSIDE_MARK = "‡"


def overlap_text(value: float, status: Any, unc: Any = None,
                  prefill_share: Any = None, lower_bound: bool = False) -> str:
    """An overlap as the tables show it: "0.81 ±0.05" with its ± (a 95% interval
    over the cell's releases; "±0.03†" where the cell released once and the ± is
    the single stream's alone, a lower bound), one decimal without one ("0.8"), ⚠ where
    it is impossible (`overlap_flag`), the failure beside it where the cell failed."""
    if np.isfinite(value):
        # A completed cell classed as failed (decode below the crash threshold) still has
        # a real overlap; show it with the failure beside it.
        if pairs.finite(unc):
            figure = f"{fixed(value)} ±{unc:.2f}"
            figure += ONE_RELEASE_MARK if lower_bound else ""
        else:
            figure = f"{fixed(value, 1)}"
        if overlap_flag(value, unc, prefill_share):
            figure += f" {FLAG_MARK}"
        elif overlap_outside(value, unc, prefill_share):
            figure += OUTSIDE_MARK
        return figure if status == "ok" else f"{figure} {status_text(status)}"
    return status_text(status) if status != "ok" else "—"


def plus_minus(value: float, unc: float, status: Any, spec: str | Callable[[float], str],
                flags: Any = None) -> str:
    """A cell's figure with its ± where known, its failure where it failed, ⚠ where it
    is flagged."""
    text = _cell_text(value, status, spec)
    if status == "ok" and pairs.finite(value) and pairs.finite(unc):
        text += f" ±{spec(unc) if callable(spec) else format(unc, spec)}"
    return flagged(text, flags)


def links_table(links: pd.DataFrame,
                interference_limits: InterferenceLimits | None = None) -> pd.DataFrame:
    """The seed's Links table (Gbit/s, ms) plus request-response latency and what was
    negotiated and emulated, from the link results' rows (read_links); a link measured
    while other work used the CPUs has it in its flags (⚠). Where sockperf timed any of
    the links (`link_check.sockperf`), its 16 KB p50 stands beside the probe's."""
    # Older or partial link results lack some columns: show them as unknown.
    rates = [f"{c}{s}" for c in ("a_to_b_gbps", "b_to_a_gbps", "bidir_gbps")
             for s in ("", "_min", "_max")]
    links = links.reindex(columns=list(dict.fromkeys([
        *links.columns, "pair", "link", *rates, "ping_ms", "rr16k_p50_us", "rr_fixed_us",
        "rr_us_per_kb", "negotiated_gbps", "emulation_rate", "emulation_delay", "lan_hosts",
        "sockperf16k_p50_us", "flags"])))
    sockperf = pd.to_numeric(links["sockperf16k_p50_us"], errors="coerce")
    links[rates] = links[rates].apply(pd.to_numeric, errors="coerce")
    links[["emulation_rate", "emulation_delay"]] = links[
        ["emulation_rate", "emulation_delay"]].astype(object).fillna("none")

    def gbps(column: str) -> pd.Series:
        spread = links[f"{column}_max"] - links[f"{column}_min"]
        return [f"{v:.2f} ±{s / 2:.2f}" if s > 0 else f"{v:.2f}" if np.isfinite(v) else "—"
                for v, s in zip(links[column], spread, strict=True)]

    emulated = links["emulation_rate"].where(links["emulation_rate"] != "none", "")
    delay = links["emulation_delay"].where(links["emulation_delay"] != "none", "")
    return pd.DataFrame({
        "pair": links["pair"],
        "link": links["link"],
        "A→B": gbps("a_to_b_gbps"),
        "B→A": gbps("b_to_a_gbps"),
        "bidirectional total": gbps("bidir_gbps"),
        "idle ping (ms)": pd.to_numeric(links["ping_ms"]).round(3),
        "16 KB RR p50 (µs)": pd.to_numeric(links["rr16k_p50_us"]).round(0),
        # A second tool's view of the same path, 6.5 s a link: shown where it ran.
        **({"16 KB RR p50, sockperf (µs)": sockperf.round(0)} if sockperf.notna().any()
           else {}),
        "fixed overhead (µs)": pd.to_numeric(links["rr_fixed_us"]).round(0),
        "µs per KB": pd.to_numeric(links["rr_us_per_kb"]).round(2),
        "negotiated (Gbit/s)": links["negotiated_gbps"],
        "emulation": [f"none: the LAN of host{'s' * (' and ' in lan)} {lan}, as it is"
                      if isinstance(lan, str) and lan
                      else " + ".join(x for x in (r, d) if x) or "none"
                      for r, d, lan in zip(emulated, delay, links["lan_hosts"], strict=True)],
        "flags": link_flags(links, interference_limits, mark=f"{FLAG_MARK} "),
    })
