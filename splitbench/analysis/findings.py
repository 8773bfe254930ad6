"""What the run found, in sentences: the answer the report opens with.

Every sentence is built from this run's figures by branches of code (a cost that is
resolvable or not, constant or growing with context, a term that dominates or neither,
concurrency that depends on the link or not); nothing is fixed text. A finding the data
cannot carry says "not resolvable on this data" and what would resolve it.

`collect` gathers the findings from the analysis frames; `markdown` writes them
(results/findings.md, the report's first section); the bold opening of each finding is
its headline, which the run prints last (checks.headlines). The `findings` stage
computes the frames from the run's files.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from splitbench.analysis import checks, comparison, mechanisms, whatif
from splitbench.analysis.cell_summary import by_length, link_flags, read_links
from splitbench.analysis.comparison import COVERAGE
from splitbench.analysis.marks import FLAG_MARK
from splitbench.stage import Stage, json_arg

# A cost is "mostly fixed per step" when at least this share of it at the longest
# resolved context is already there at the shortest (a term that grows with context, the
# attention mask or the bandwidth of a growing hidden state, starts near zero).
FIXED_SHARE = 0.5
# Concurrency "collapses" where overlap falls from at least HIGH at the shortest context
# to at most LOW at the longest, on every link.
OVERLAP_HIGH, OVERLAP_LOW = 0.5, 0.2
# Rates within this share count as "on par" when two links are set side by side.
ON_PAR = 0.10

COMPARISON = "[link comparison](#table-link_comparison)"
MECHANISMS = "[mechanisms](#table-mechanisms)"
ROUND_TRIPS = "[round trips](#table-round_trips)"
SENSITIVITY = "[what-if chart](#chart-decode_sensitivity)"
PREFILL = "[prefill](#table-single_stream_prefill)"
BOUNDARY = "[concurrency boundary](#table-concurrency_boundary)"
OVERLAP = "[overlap](#table-overlap)"
LINKS = "[links](#table-links)"
DECODE_CHART = "[decode Δ chart](#chart-decode_delta)"


@dataclass
class Finding:
    """One or two sentences with their numbers, under the heading `section`; a bold
    opening is its headline (checks.headlines prints it)."""
    section: str
    text: str
    refs: Sequence[str] = field(default_factory=tuple)


# --- numbers as text ------------------------------------------------------------------
def _ms(value: float) -> str:
    return f"{value:+.1f}" if abs(value) >= 10 else f"{value:+.2f}"


def _pm(value: float, unc: float, fmt: str = "ms") -> str:
    """"+0.70 ±0.06" (ms), "+17 ±4%" (pct); the ± left out where unknown."""
    if fmt == "pct":
        return f"{value:+.0f}%" + (f" ±{unc:.0f}%" if np.isfinite(unc) else "")
    text = _ms(value)
    if np.isfinite(unc):
        text += f" ±{abs(float(_ms(unc))):.{1 if abs(value) >= 10 else 2}f}"
    return text


def _num(value: Any) -> float:
    number = pd.to_numeric(value, errors="coerce")
    return float(number) if number is not None and np.isfinite(number) else np.nan


def _listing(parts: Sequence[str]) -> str:
    parts = list(parts)
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _flags_of(rows: pd.DataFrame, columns: Sequence[str] = ("flags", "flags_base")
              ) -> list[tuple[str, str]]:
    """(where, why) for each row whose flags are set in any of `columns`: the cells (or
    links) a finding drawn from `rows` rests on that carry ⚠ in their table."""
    out = []
    for _, r in rows.iterrows():
        why = [str(r[c]) for c in columns if c in rows and isinstance(r[c], str) and r[c]]
        if why:
            where = " ".join(str(r[c]) for c in ("link", "ctx") if c in rows)
            if "conc" in rows and r["conc"] > 1:
                where += f" {r['conc']}-way"
            out.append((where, why[0].split("; ")[0]))
    return out


def marked(found: Finding | None, flagged: Sequence[tuple[str, str]], what: str = "cells"
           ) -> Finding | None:
    """`found` with ⚠ at the start of its headline and a sentence naming the flagged
    `what` it was drawn from, so that its headline, printed alone at the end of the run,
    carries the flag too. Unchanged where nothing it rests on is flagged."""
    if found is None or not flagged:
        return found
    text = found.text
    if text.startswith("**") and not text.startswith(f"**{FLAG_MARK}"):
        text = f"**{FLAG_MARK} " + text[2:]
    where = _listing(list(dict.fromkeys(w for w, _ in flagged)))
    text += (f" {FLAG_MARK} It rests on flagged {what}, {where} (the first: "
             f"{flagged[0][1]}): the machine may be in these figures as well as the link.")
    found.text = text
    return found


# --- decode: what each link costs, and why ---------------------------------------------
def decode_cost(rows: pd.DataFrame, link: str, section: str) -> Finding:
    """What `link` costs decode against the baseline at each context (rows: the link
    comparison's rows of one pair, model and link, shortest context first, with the
    prediction's columns), whether that cost is fixed per step or grows with context,
    and, where the round trips are known, why."""
    ok = rows[(rows["status"] == "ok") & (rows["status_base"] == "ok")
              & rows["decode_delta_ms"].notna()]
    failed = rows[~rows.index.isin(ok.index)]
    lost = [f"{r.ctx} ({_failed_side(r)})" for r in failed.itertuples()]
    if ok.empty:
        text = (f"**{link}: no context has both its cell and the baseline's ok**, so what "
                f"it costs decode is not measured ({_listing(lost) if lost else 'no cells'}).")
        return Finding(section, text, (COMPARISON,))
    clear = ok[ok["decode_delta_unc_ms"].notna()
               & (ok["decode_delta_ms"].abs() > ok["decode_delta_unc_ms"])]
    unclear = ok[~ok.index.isin(clear.index)]
    # Faster than the baseline beyond the ±: no link can be, so that difference is the
    # machine's, never a saving the link brings (the table marks it too).
    faster = clear[clear["decode_delta_ms"] < 0]
    clear = clear[clear["decode_delta_ms"] > 0]
    impossible = _faster_than_baseline(faster) if len(faster) else ""
    if clear.empty and len(faster):
        text = (f"**{FLAG_MARK} {link}: decode measured faster than the baseline, which no "
                f"link can be** ({impossible}): {MACHINE_MOVED}. {_advice(ok)}")
        return Finding(section, text, (COMPARISON, DECODE_CHART))
    if clear.empty:
        figures = _listing([f"{r.ctx} {_pm(r.decode_delta_ms, r.decode_delta_unc_ms)}"
                            for r in ok.itertuples()])
        text = (f"**{link}: what it costs decode is not resolvable on this data** "
                f"({figures} ms/token: each lies inside its ±). {_advice(ok)}")
        return Finding(section, text, (COMPARISON, DECODE_CHART))
    lead = clear.iloc[0]
    share = lead["decode_delta_ms"] / lead["decode_ms_per_token_base"] * 100
    figure = _pm(lead["decode_delta_ms"], lead["decode_delta_unc_ms"])
    head = (f"**{link} costs decode {figure} ms/token at {lead['ctx']} "
            f"({share:+.0f}% of a {lead['decode_ms_per_token_base']:.2f} ms step)**")
    parts = [head + "."]
    if len(faster):
        parts.append(f"{FLAG_MARK} It measured faster than the baseline at {impossible}, "
                     f"which no link can be: {MACHINE_MOVED}.")
    others = clear.iloc[1:]
    if len(others):
        parts.append("At " + _listing([f"{r.ctx} {_pm(r.decode_delta_ms, r.decode_delta_unc_ms)}"
                                       for r in others.itertuples()]) + ".")
    parts.append(_constancy(clear, unclear))
    if lost:
        parts.append(f"Not measured at {_listing(lost)}.")
    why = _why(lead)
    return Finding(section, " ".join(p for p in [*parts, why] if p),
                   (COMPARISON, MECHANISMS, DECODE_CHART))


def _faster_than_baseline(rows: pd.DataFrame) -> str:
    """The contexts where a link measured faster than the baseline beyond its ±."""
    return _listing([f"{r.ctx} {_pm(r.decode_delta_ms, r.decode_delta_unc_ms)} ms/token"
                     for r in rows.itertuples()])


# Why a link that measured faster than the baseline did: never the link.
MACHINE_MOVED = ("the machine's speed moved between the two cells by more than their ±: "
                 "the difference is the machine's, not the link's")


def _failed_side(row: Any) -> str:
    if row.status != "ok":
        return f"the cell: {row.status}"
    if isinstance(row.status_base, str) and row.status_base != "ok":
        return f"the baseline's cell: {row.status_base}"
    return "no baseline cell"


def _advice(rows: pd.DataFrame) -> str:
    """What would resolve these differences: more rounds where they were paired, pairing
    (or a quieter machine) where they were measured one after the other."""
    paired = rows["compared"].astype(str).str.startswith("paired")
    advice = []
    if paired.any():
        advice.append(f"more paired rounds at {_listing(list(rows[paired]['ctx']))} "
                      "(cell.paired.rounds)")
    if (~paired).any():
        advice.append(f"pairing {_listing(list(rows[~paired]['ctx']))} with the baseline "
                      "(cell.paired.contexts) or a quieter machine")
    return f"To resolve it: {' or '.join(advice)}."


def _constancy(clear: pd.DataFrame, unclear: pd.DataFrame) -> str:
    """Whether the resolved cost is the same at every context (a fixed per-step cost) or
    grows with context (bandwidth or the attention mask)."""
    if len(clear) < 2:
        if unclear.empty:
            return ""
        figures = _listing([f"{r.ctx} {_pm(r.decode_delta_ms, r.decode_delta_unc_ms)}"
                            for r in unclear.itertuples()])
        return (f"Whether it stays the same at longer contexts is not resolvable on this "
                f"data ({figures}). {_advice(unclear)}")
    first, last = clear.iloc[0], clear.iloc[-1]
    d0, d1 = first["decode_delta_ms"], last["decode_delta_ms"]
    values, uncs = clear["decode_delta_ms"].to_numpy(), clear["decode_delta_unc_ms"].to_numpy()
    pairs = [(i, j) for i in range(len(values)) for j in range(i + 1, len(values))]
    same = all(abs(values[i] - values[j]) <= np.hypot(uncs[i], uncs[j]) for i, j in pairs)
    step0, step1 = first["decode_ms_per_token_base"], last["decode_ms_per_token_base"]
    steps = f"while the step grows {step1 / step0:.1f}× ({step0:.2f} → {step1:.2f} ms)"
    if same:
        text = (f"The same at every context it resolves, {steps}: a fixed per-step cost, "
                "not one that grows with context.")
    elif np.sign(d0) == np.sign(d1) and abs(d0) >= FIXED_SHARE * abs(d1):
        text = (f"Mostly a fixed per-step cost: {_ms(d0)} of the {_ms(d1)} at {last['ctx']} "
                f"is already there at {first['ctx']}, {steps}")
        growth = d1 - d0
        if abs(growth) > np.hypot(first["decode_delta_unc_ms"], last["decode_delta_unc_ms"]):
            text += f"; {_ms(growth)} grows with context (a bandwidth or mask term)"
        text += "."
    else:
        text = (f"It grows with context, from {_ms(d0)} at {first['ctx']} to {_ms(d1)} at "
                f"{last['ctx']}: a term that scales with context (the bytes of the attention "
                "mask or a growing transfer) outweighs any fixed per-step cost.")
    if len(unclear):
        text += (" Not resolvable at " + _listing(
            [f"{r.ctx} ({_pm(r.decode_delta_ms, r.decode_delta_unc_ms)})"
             for r in unclear.itertuples()]) + ".")
    return text


def _why(row: pd.Series) -> str:
    """The mechanism at the finding's lead context: round trips x the latency difference
    against the bandwidth term, which dominates, and whether the measured cost agrees."""
    latency, latency_unc = _num(row.get("predicted_latency_ms")), _num(
        row.get("predicted_latency_unc_ms"))
    bandwidth, bandwidth_unc = _num(row.get("predicted_bandwidth_ms")), _num(
        row.get("predicted_bandwidth_unc_ms"))
    trips, gap_us = _num(row.get("round_trips")), _num(row.get("latency_delta_us"))
    if not np.isfinite(latency):
        return ""  # said once for the model (round_trip_floor)
    text = (f"That is {trips:.2f} round trips per token × {gap_us:+.0f} µs of extra "
            f"request-response latency = {_pm(latency, latency_unc)}")
    if np.isfinite(bandwidth):
        text += (f"; the link's bandwidth adds {_pm(bandwidth, bandwidth_unc)}: "
                 f"{_dominance_words(bandwidth, bandwidth_unc, latency, latency_unc)}")
    else:
        text += ("; the bandwidth term is unknown (no bytes per token or throughput "
                 "measured)")
    predicted, predicted_unc = _num(row.get("predicted_decode_delta_ms")), _num(
        row.get("predicted_decode_delta_unc_ms"))
    verdict = comparison.agrees(row["decode_delta_ms"], row["decode_delta_unc_ms"],
                                predicted, predicted_unc)
    if verdict is True:
        text += f". The measured {_ms(row['decode_delta_ms'])} agrees with that prediction"
    elif verdict is False:
        text += (f". ⚠ The measured {_ms(row['decode_delta_ms'])} disagrees with the "
                 f"prediction {_pm(predicted, predicted_unc)} beyond their ±: something "
                 "else differs between the links")
    return text + "."


def _dominance_words(bandwidth: float, bandwidth_unc: float, latency: float,
                     latency_unc: float) -> str:
    verdict = mechanisms.dominance(bandwidth, bandwidth_unc, latency, latency_unc)
    return {"latency dominates": "latency dominates (the cost is round trips, not bytes)",
            "bandwidth dominates": "bandwidth dominates (the cost is the token's bytes, "
                                   "not round trips)"}.get(verdict, verdict)


def round_trip_floor(trips: pd.DataFrame, model_rows: pd.DataFrame, section: str
                     ) -> Finding | None:
    """The sweep's round trips per token against the topological floor (one per RPC
    worker), and the latency below which the model's decode does not feel the link."""
    parts = []
    for r in trips.sort_values("workers").itertuples():
        unc = COVERAGE * _num(r.round_trips_se)
        figure = f"{r.round_trips:.2f}" + (f" ±{unc:.2f}" if np.isfinite(unc) else "")
        gap = r.round_trips - r.workers
        where = ("at the floor" if np.isfinite(unc) and abs(gap) <= unc
                 else f"{gap:+.2f} above the floor: blocking transactions a better "
                      "protocol could save" if gap > 0
                 else f"{-gap:.2f} below the floor: the sweep's latency figure reads more "
                      "than a decode step pays")
        parts.append((f"{figure} round trips per token with {r.workers} RPC worker"
                      f"{'s' if r.workers > 1 else ''}", f"the floor is {r.workers}: {where}"))
    text = ""
    if parts:
        text = f"**{parts[0][0]}** ({parts[0][1]})"
        if len(parts) > 1:
            text += "; " + "; ".join(f"{head} ({why})" for head, why in parts[1:])
        text += "."
    short = model_rows.iloc[0] if len(model_rows) else None
    felt = whatif.felt_above_us(short) if short is not None else np.nan
    if np.isfinite(felt):
        text += (f" Below ~{felt:.0f} µs of request-response latency this model's decode "
                 f"does not feel the link (its {short['round_trips']:.2f} round trips add "
                 f"under {whatif.FELT_ABOVE:.0%} to the {short['compute_ms']:.2f} ms of "
                 f"compute at {short['ctx']}).")
    if not parts:
        text = ("**Why a link costs what it does is not resolvable on this data**: no round "
                "trips per token were measured for this model (the round-trip sweep, "
                "`roundtrips:`), so its decode cost cannot be split into round trips × "
                "latency and bandwidth." + text)
    return Finding(section, text.strip(), (ROUND_TRIPS, SENSITIVITY))


# --- prefill ----------------------------------------------------------------------------
def prefill(rows: pd.DataFrame, links: pd.DataFrame, fit: pd.Series | None, section: str
            ) -> Finding | None:
    """Prefill's elasticity to one-way bandwidth and each link's example (rows: the link
    comparison of one pair and model; fit: the mechanisms table's prefill row)."""
    examples = _prefill_examples(rows, links)
    if not examples:
        return None
    slope, unc = (_num(fit["slope"]), _num(fit["±"])) if fit is not None else (np.nan, np.nan)
    figure = f"elasticity {slope:.2f}" + (f" ±{unc:.2f}" if np.isfinite(unc) else "")
    said = "; ".join(e["text"] for e in examples)
    floor = min(e["gbps"] for e in examples)
    if np.isfinite(unc) and abs(slope) + unc < mechanisms.INSENSITIVE_BELOW:
        text = (f"**Prefill no longer depends on the link's bandwidth at these rates** "
                f"({figure}): {said}. From {floor:.2f} Gbit/s one way, prefill is bound by "
                "compute, not by the cable.")
    elif np.isfinite(slope) and np.isfinite(unc) and slope > unc and fit is not None \
            and not str(fit["verdict"]).startswith("not resolvable"):
        head = ("Prefill tracks one-way bandwidth" if slope >= mechanisms.TRACKS_ABOVE
                else "Prefill is partly bandwidth-bound")
        text = f"**{head}** ({figure}): {said}."
    else:
        why = str(fit["verdict"]).split(": ", 1)[-1].split(" (")[0] if fit is not None \
            else "no fit"
        text = (f"**Prefill's dependence on bandwidth is not resolvable on this data** "
                f"({why}): {said}. Links of more different bandwidth, or longer prompts "
                "(prefill moves more bytes per second there), would resolve it.")
    return Finding(section, text, (PREFILL, COMPARISON, MECHANISMS))


def _prefill_examples(rows: pd.DataFrame, links: pd.DataFrame) -> list[dict[str, Any]]:
    """Per link: its one-way bandwidth against the baseline's and what prefill did at
    the longest context both measured (and the range over contexts)."""
    rates = links.reindex(columns=["pair", "link", "a_to_b_gbps"])
    out = []
    for link, group in rows.groupby("link", sort=False):
        ok = group[(group["status"] == "ok") & (group["status_base"] == "ok")
                   & group["prefill_change_pct"].notna()]
        pair = group["pair"].iloc[0]
        mine = _num(rates[(rates["pair"] == pair) & (rates["link"] == link)]["a_to_b_gbps"]
                    .max())
        base = _num(rates[(rates["pair"] == pair) & (rates["link"] == group["baseline"].iloc[0])]
                    ["a_to_b_gbps"].max())
        if ok.empty or not (np.isfinite(mine) and np.isfinite(base)):
            continue
        longest = ok.iloc[-1]
        change = (mine / base - 1) * 100
        text = (f"{link}'s {change:+.0f}% one-way bandwidth ({mine:.2f} against "
                f"{base:.2f} Gbit/s) {'buys' if longest['prefill_change_pct'] >= 0 else 'costs'}"
                f" {_pm(longest['prefill_change_pct'], longest['prefill_change_unc_pct'], 'pct')}"
                f" prefill at {longest['ctx']}")
        if len(ok) > 1:
            text += (f" ({ok['prefill_change_pct'].min():+.0f}% to "
                     f"{ok['prefill_change_pct'].max():+.0f}% over contexts)")
        out.append({"link": link, "text": text, "gbps": min(mine, base),
                    "bandwidth_pct": change, "longest_pct": longest["prefill_change_pct"]})
    return out


def prefill_across_models(comp: pd.DataFrame, links: pd.DataFrame) -> Finding | None:
    """Per link, the prefill each model gained at its longest context for the link's
    bandwidth: the range over models (the seed's "+55% bandwidth buys +5-17%")."""
    per_link: dict[str, list[float]] = {}
    bandwidth: dict[str, float] = {}
    for _, rows in comp.groupby(["pair", "model"], sort=False):
        for example in _prefill_examples(rows, links):
            per_link.setdefault(example["link"], []).append(example["longest_pct"])
            bandwidth[example["link"]] = example["bandwidth_pct"]
    if len({m for m in comp["model"]}) < 2 or not per_link:
        return None
    parts = [f"{link}'s {bandwidth[link]:+.0f}% one-way bandwidth: {min(v):+.0f}% to "
             f"{max(v):+.0f}% prefill at each model's longest context"
             for link, v in per_link.items()]
    return Finding("Across models", "Prefill, " + "; ".join(parts) + ".", (PREFILL,))


def decode_across_models(comp: pd.DataFrame) -> Finding | None:
    """Per link, its decode cost at each model's shortest resolved context against the
    models' steps: a cost that stays while the step varies is a per-step cost that does
    not follow model speed (the seed: "independent of model speed")."""
    parts = []
    for link, rows in comp.groupby("link", sort=False):
        ok = rows[(rows["status"] == "ok") & (rows["status_base"] == "ok")
                  & rows["decode_delta_unc_ms"].notna()
                  & (rows["decode_delta_ms"].abs() > rows["decode_delta_unc_ms"])]
        first = ok.groupby(["pair", "model"], sort=False).head(1)
        if first["model"].nunique() < 2:
            continue
        deltas, steps = first["decode_delta_ms"], first["decode_ms_per_token_base"]
        text = (f"{link} {_ms(deltas.min())} to {_ms(deltas.max())} ms/token over "
                f"{first['model'].nunique()} models whose steps range "
                f"{steps.min():.2f}–{steps.max():.2f} ms")
        if np.sign(deltas.min()) == np.sign(deltas.max()) and \
                deltas.abs().max() / deltas.abs().min() < steps.max() / steps.min():
            text += ": the cost does not follow model speed (a per-step cost)"
        parts.append(text)
    if not parts:
        return None
    return Finding("Across models", "Decode, at each model's shortest resolved context: "
                   + "; ".join(parts) + ".", (COMPARISON,))


# --- concurrency --------------------------------------------------------------------------
def boundary(statuses: dict[int, Any]) -> tuple[int | None, int | None, str | None]:
    """(highest level up to which every level is ok, the next level, its failure) from
    a cell's status per concurrency level; (None, lowest, status) when one stream fails."""
    levels = sorted(statuses)
    top = None
    for level in levels:
        status = statuses[level]
        if not isinstance(status, str):
            break  # not measured: as far as we know
        if status != "ok":
            return top, level, status
        top = level
    return top, None, None


# How a level fails, in the seed's words (400: the context wall, 500: overflow).
FAILS_AT = {"load": "does not load at", "crash": "crashes at", "overflow": "500 at",
            "ctx_wall": "400 at", "timeout": "times out at", "error": "fails at"}


def _boundary_text(found: tuple[int | None, int | None, str | None]) -> str:
    top, at, status = found
    if at is None:
        return "not measured" if top is None else f"{top}"
    failure = f"{FAILS_AT.get(str(status), f'{status} at')} {at}"
    return f"none ({failure})" if top is None else f"{top} ({failure})"


def concurrency(cells: pd.DataFrame, contexts: Sequence[str], section: str
                ) -> list[Finding]:
    """Whether the usable concurrency and the overlap depend on the link (cells: the
    summary rows of one pair and model)."""
    out = []
    links = list(dict.fromkeys(cells["link"]))
    order = [c for c in contexts if c in set(cells["ctx"])]
    per = {(link, ctx): boundary(dict(zip(g["conc"], g["status"], strict=True)))
           for (link, ctx), g in cells.groupby(["link", "ctx"])}
    if cells["conc"].max() > 1:
        differ = [ctx for ctx in order
                  if len({per.get((link, ctx)) for link in links if (link, ctx) in per}) > 1]
        if differ:
            ctx = differ[0]
            text = (f"**Usable concurrency differs between links**: at {ctx}, " + _listing(
                [f"{link} {_boundary_text(per[(link, ctx)])}" for link in links
                 if (link, ctx) in per]) + (f" (and at {_listing(differ[1:])})"
                                            if len(differ) > 1 else "") + ".")
        else:
            reference = links[0]
            levels = "; ".join(f"{ctx} {_boundary_text(per[(reference, ctx)])}"
                               for ctx in order if (reference, ctx) in per)
            failed = any(per[(reference, ctx)][1] is not None for ctx in order
                         if (reference, ctx) in per)
            whose = f"all {len(links)} links" if len(links) > 1 else f"the one link ({reference})"
            text = (f"**Usable concurrency is the same on {whose}**: {levels} streams."
                    + (" Where it stops, it stops alike on every link: the limit is memory "
                       "or compute, not the link." if failed and len(links) > 1 else
                       " Every level measured is usable: the boundary lies above them."
                       if not failed else ""))
        out.append(Finding(section, text, (BOUNDARY,)))
        overlap = _overlap_finding(cells, order, section)
        if overlap:
            out.append(overlap)
    return out


def _overlap_finding(cells: pd.DataFrame, order: Sequence[str], section: str
                     ) -> Finding | None:
    many = cells[(cells["conc"] > 1) & cells["overlap"].notna()]
    if many.empty:
        return None
    top = int(many["conc"].max())
    unc_column = "overlap_unc" if "overlap_unc" in many else None
    links = list(dict.fromkeys(many["link"]))
    parts, differences = [], []
    for ctx in order:
        here = many[(many["ctx"] == ctx) & (many["conc"] == top)]
        if here.empty:
            continue
        # A lower-bound ± (one release) cannot show two links apart.
        values = {r.link: (r.overlap, np.nan if getattr(r, "overlap_unc_lower_bound", False)
                           is True else _num(getattr(r, "overlap_unc", np.nan)))
                  for r in here.itertuples()}
        lo, hi = min(v for v, _ in values.values()), max(v for v, _ in values.values())
        parts.append(f"{ctx} {lo:.2f}" + (f" to {hi:.2f}" if hi - lo >= 0.005 else ""))
        items = list(values.values())
        if any(np.isfinite(ua) and np.isfinite(ub) and abs(va - vb) > np.hypot(ua, ub)
               for i, (va, ua) in enumerate(items) for vb, ub in items[i + 1:]):
            differences.append(f"at {ctx}, " + ", ".join(
                f"{link} {_pm2(v, u)}" for link, (v, u) in values.items()))
    figures = "; ".join(parts)
    shortest = many[(many["ctx"] == order[0]) & (many["conc"] == top)]["overlap"]
    longest = many[(many["ctx"] == order[-1]) & (many["conc"] == top)]["overlap"]
    collapse = (len(order) > 1 and len(shortest) and len(longest)
                and shortest.min() >= OVERLAP_HIGH and longest.max() <= OVERLAP_LOW)
    if unc_column is None or many[unc_column].isna().all():
        head = f"**{top}-way overlap: {figures}**"
        tail = ("; each cell is one release, so whether it differs between links is not "
                "resolvable on this data (more releases per cell would resolve it)"
                if len(links) > 1 else f" (measured on {links[0]} only)")
    elif differences:
        head = f"**{top}-way overlap differs between links**"
        tail = f" beyond their ±: {'; '.join(differences)}"
    else:
        head = f"**{top}-way overlap is the same on every link within its ±**"
        tail = f" ({figures})"
    text = head + tail + "."
    if unc_column is not None and many[unc_column].notna().any():
        once = many["releases"] if "releases" in many else pd.Series(np.nan, many.index)
        bare = [ctx for ctx in order if len(here := once[(many["ctx"] == ctx)
                                                         & (many["conc"] == top)])
                and (here == 1).all()]
        if bare:
            text += (f" At {_listing(bare)} each cell is one release (its ± only a lower "
                     "bound): whether links differ there is not resolvable on this data "
                     "(cell.concurrent_releases would resolve it).")
    if collapse:
        where = "on every link" if len(links) > 1 else f"on {links[0]}"
        text += (f" It falls from {shortest.min():.2f} or more at {order[0]} to "
                 f"{longest.max():.2f} or less at {order[-1]} {where}: long prompts' "
                 "prefill runs one slot at a time, whatever the link.")
    return Finding(section, text, (OVERLAP, BOUNDARY))


def _pm2(value: float, unc: float) -> str:
    return f"{value:.2f}" + (f" ±{unc:.2f}" if np.isfinite(unc) else "")


# --- the links ----------------------------------------------------------------------------
def link_facts(links: pd.DataFrame, baseline: str | None) -> list[tuple[Finding, str]]:
    """Per link, (its finding, the link): one way against both ways at once, asymmetry,
    and the fixed part of a request-response (the seed's "bidirectional total 29%
    lower", "326 µs fixed")."""
    out = []
    for _, r in links.iterrows():
        if r.get("status") == "failed":
            continue
        a, b, both = (_num(r.get(c)) for c in ("a_to_b_gbps", "b_to_a_gbps", "bidir_gbps"))
        if not (np.isfinite(a) and np.isfinite(b)):
            continue
        text = f"**{r['link']}: {a:.2f} Gbit/s A→B and {b:.2f} B→A**"
        spread = max(_num(r.get("a_to_b_gbps_max")) - _num(r.get("a_to_b_gbps_min")),
                     _num(r.get("b_to_a_gbps_max")) - _num(r.get("b_to_a_gbps_min")))
        allowed = spread if np.isfinite(spread) and spread > 0 else ON_PAR * max(a, b)
        text += (f" (asymmetric by {abs(a - b) / max(a, b):.0%})" if abs(a - b) > allowed
                 else "")
        if np.isfinite(both):
            text += (f"; both ways at once {both:.2f} in total, "
                     f"{1 - both / (a + b):.0%} below the two one-way rates added")
            base = links[links["link"] == baseline]
            if len(base) and r["link"] != baseline:
                ba, bb, bboth = (_num(base.iloc[0].get(c)) for c in
                                 ("a_to_b_gbps", "b_to_a_gbps", "bidir_gbps"))
                on_par = all(np.isfinite(x) and abs(x / y - 1) <= ON_PAR
                             for x, y in ((a, ba), (b, bb)))
                if on_par and np.isfinite(bboth) and abs(both / bboth - 1) > ON_PAR:
                    text += (f": one way on par with {baseline}, but both ways "
                             f"{abs(both / bboth - 1):.0%} "
                             f"{'lower' if both < bboth else 'higher'} ({bboth:.2f})")
        p50, fixed = _num(r.get("rr16k_p50_us")), _num(r.get("rr_fixed_us"))
        if np.isfinite(p50):
            text += f"; a 16 KB request-response takes {p50:.0f} µs at the median"
            if np.isfinite(fixed):
                text += f", {fixed:.0f} µs of it fixed (the intercept over message sizes)"
        out.append((Finding("The links", text + ".", (LINKS,)), r["link"]))
    return out


# --- what did not work, and how far to trust the rest ----------------------------------
def failures(lines: Sequence[tuple[str, str]]) -> list[Finding]:
    """The checks that failed (a toolchain, a link, a launch, a check that did not run),
    first in the findings."""
    return [Finding("What did not work", f"✗ {text}", ("[checks](#checks)",))
            for state, text in lines if state == "failed"]


def trust(lines: Sequence[tuple[str, str]], comp: pd.DataFrame) -> list[Finding]:
    """The flagged checks, said once (the cells they concern carry ⚠ in the tables), and
    whether some differences' ± are lower bounds."""
    section = "How far to trust these figures"
    out = [Finding(section, f"⚠ {text}", ("[checks](#checks)",))
           for state, text in lines if state == "flagged"]
    lower = comp[comp["decode_lower_bound"].fillna(False).astype(bool)
                 & (comp["status"] == "ok")] if "decode_lower_bound" in comp else comp[:0]
    if len(lower):
        out.append(Finding(section, (
            f"{len(lower)} of {len(comp)} link differences were measured one after the other "
            "with no drift anchors to measure how much the machine itself varied between "
            "them: their ± are lower bounds, and a difference outside one is not proof "
            "(the `drift:` anchors, or pairing with the baseline, give a true ±)."),
            (COMPARISON,)))
    common = common_offset(comp)
    if common:
        out.append(common)
    return out


def common_offset(comp: pd.DataFrame) -> Finding | None:
    """Where every link disagrees with its prediction, by the same gap within their ±:
    not the links' costs but the latency figure the prediction starts from (the probe
    reads more or less than the decode path pays, by a constant), said once."""
    if "predicted_decode_delta_ms" not in comp or comp.empty:
        return None
    rows = comp[(comp["status"] == "ok") & (comp["status_base"] == "ok")]
    gaps = []
    for _, r in rows.iterrows():
        verdict = comparison.agrees(r["decode_delta_ms"], r["decode_delta_unc_ms"],
                                    _num(r.get("predicted_decode_delta_ms")),
                                    _num(r.get("predicted_decode_delta_unc_ms")))
        if verdict is False:
            gaps.append((r["link"], r["ctx"], r["decode_delta_ms"]
                         - r["predicted_decode_delta_ms"],
                         float(np.hypot(r["decode_delta_unc_ms"],
                                        np.nan_to_num(r["predicted_decode_delta_unc_ms"])))))
    links = {g[0] for g in gaps}
    if len(links) < 2:
        return None
    values = np.array([g[2] for g in gaps])
    spread = np.array([g[3] for g in gaps])
    shared = np.all(np.sign(values) == np.sign(values[0])) and all(
        abs(a - b) <= np.hypot(sa, sb) * comparison.AGREEMENT_SIGMAS / COVERAGE
        for i, (a, sa) in enumerate(zip(values, spread, strict=True))
        for b, sb in zip(values[i + 1:], spread[i + 1:], strict=True))
    if not shared:
        return None
    where = _listing(sorted({f"{g[0]} at {g[1]}" for g in gaps}))
    return Finding("How far to trust these figures", (
        f"⚠ {where} all differ from their predictions by the same {_ms(values.min())} to "
        f"{_ms(values.max())} ms/token: one offset shared by every link, not each link's "
        "own cost. It points at what every comparison shares, the baseline or the way "
        "latency is measured (the links' 64 B request-response probe against what a decode "
        "step's messages pay), not at the links; their order and the round trips stand, "
        "their predicted cost is off by that much."), (COMPARISON, SENSITIVITY))


# --- all together -------------------------------------------------------------------------
def collect(summary: pd.DataFrame, links: pd.DataFrame, comp: pd.DataFrame,
            trips: pd.DataFrame, mechanism_rows: pd.DataFrame, model_rows: pd.DataFrame,
            contexts: Sequence[str], baseline: str | None,
            check_lines: Sequence[tuple[str, str]] = ()) -> list[Finding]:
    """Every finding of a run, in the order they are read. `comp`: compare_links rows
    with predicted_decode_delta's columns beside them; `trips`: comparison.round_trips;
    `mechanism_rows`: mechanisms.table; `model_rows`: whatif.model."""
    out = failures(check_lines)
    pairs = summary["pair"].nunique() > 1
    order = {c: i for i, c in enumerate(contexts)}
    comp = comp.assign(_order=comp["ctx"].map(order)).sort_values(
        ["pair", "model", "link", "_order"]).drop(columns="_order")
    for (pair, model), cells in summary.groupby(["pair", "model"], sort=False):
        section = f"{model} on {pair}" if pairs else str(model)
        mine = comp[(comp["pair"] == pair) & (comp["model"] == model)]
        for link, rows in mine.groupby("link", sort=False):
            used = rows[(rows["status"] == "ok") & (rows["status_base"] == "ok")]
            out.append(marked(decode_cost(rows, str(link), section), _flags_of(used)))
        floor = round_trip_floor(
            trips[(trips["pair"] == pair) & (trips["model"] == model)],
            model_rows[(model_rows["pair"] == pair) & (model_rows["model"] == model)]
            .assign(_order=lambda f: f["ctx"].map(order)).sort_values("_order"), section)
        if floor:
            out.append(floor)
        fit = _mechanism_row(mechanism_rows, pair, model, "prefill")
        found = prefill(mine, links[links["pair"] == pair] if "pair" in links else links,
                        fit, section)
        if found:
            used = mine[(mine["status"] == "ok") & (mine["status_base"] == "ok")]
            out.append(marked(found, _flags_of(used)))
        for found in concurrency(cells, contexts, section):
            # The overlap rests on the concurrent cells; the boundary on every level.
            rests_on = cells[cells["conc"] > 1] if found.refs[0] == OVERLAP else cells
            out.append(marked(found, _flags_of(rests_on, ("flags",))))
    out += [f for f in (decode_across_models(comp), prefill_across_models(comp, links)) if f]
    for pair, facts in links.groupby("pair", sort=False) if "pair" in links else []:
        found = [marked(f, _flags_of(facts[facts["link"] == link], ("flags",)),
                        "link measurements")
                 for f, link in link_facts(facts, baseline)]
        if pairs:
            for f in found:
                f.section = f"The links of {pair}"
        out += found
    return out + trust(check_lines, comp)


def _mechanism_row(rows: pd.DataFrame, pair: str, model: str, mechanism: str
                   ) -> pd.Series | None:
    if rows is None or rows.empty:
        return None
    mine = rows[(rows["model"] == model) & (rows["mechanism"] == mechanism)]
    if "pair" in rows:
        mine = mine[mine["pair"] == pair]
    return mine.iloc[0] if len(mine) else None


def markdown(found: Sequence[Finding]) -> str:
    """The findings as Markdown: a heading per section, a bullet per finding, each
    ending with links to the tables and charts behind it."""
    lines = ["## Findings", ""]
    if not found:
        return "\n".join([*lines, "Nothing was measured, so nothing was found.", ""])
    sections: dict[str, list[Finding]] = {}
    for f in found:
        sections.setdefault(f.section, []).append(f)
    for section, items in sections.items():
        lines += [f"### {section}", ""]
        for f in items:
            refs = f" → {', '.join(f.refs)}" if f.refs else ""
            lines.append(f"- {f.text}{refs}")
        lines.append("")
    return "\n".join(lines)


# --- the `findings` stage -----------------------------------------------------------------
def run(summary_path: str, link_files: list[str], toolchain_files: list[str],
        sweep_files: list[str], anchor_files: list[str], drift_path: str | None,
        contexts: dict[str, int], baseline_link: str | None, workers: dict[str, int],
        out: str, whatif_out: str, points_out: str, tables_dir: str | None = None,
        interference_limits: dict[str, Any] | None = None) -> list[Finding]:
    summary = pq.read_table(summary_path).to_pandas()
    links = read_links(link_files)
    # A link measured while other work used the CPUs is flagged as its table flags it.
    links["flags"] = link_flags(links, interference_limits)
    order = by_length(contexts)
    base = comparison.pick_baseline(summary, baseline_link)
    drift = comparison.machine_drift(anchor_files, summary, base)
    trips = comparison.round_trips(sweep_files)

    def prediction(rows: pd.DataFrame) -> pd.DataFrame:
        return comparison.predicted_decode_delta(rows, links, trips, workers, drift)

    comp = comparison.compare_links(summary, base, drift)
    if len(comp):
        comp = pd.concat([comp, prediction(comp)], axis=1)
    mechanism_rows = mechanisms.table(summary, links, order, base, drift, prediction)
    model_rows = whatif.model(summary, links, trips, workers, base)
    whatif.write(model_rows, whatif.measured_points(model_rows, comp), whatif_out, points_out)
    toolchains = [json.loads(Path(p).read_text()) for p in toolchain_files]
    lines = checks.check_lines(summary, drift_path, links, toolchains)
    if tables_dir:
        lines += [line for line in checks.flagged_tables(tables_dir) if line[0] != "ok"]
    found = collect(summary, links, comp, trips, mechanism_rows, model_rows, order, base,
                    lines)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(markdown(found))
    return found


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--summary", required=True)
    p.add_argument("--links", nargs="+", required=True)
    p.add_argument("--toolchain", nargs="*", default=[])
    p.add_argument("--sweeps", nargs="*", default=[])
    p.add_argument("--anchors", nargs="*", default=[])
    p.add_argument("--drift", default=None, help="the drift step's report.parquet")
    p.add_argument("--contexts", type=json_arg, required=True)
    p.add_argument("--baseline", default=None)
    p.add_argument("--workers", type=json_arg, default={})
    p.add_argument("--out", required=True, help="findings.md")
    p.add_argument("--whatif", required=True, help="the what-if model's Parquet")
    p.add_argument("--points", required=True, help="the measured links beside it")
    p.add_argument("--tables", default=None, help="the tables' directory: one that flags "
                   "most of its rows is said in the findings")
    p.add_argument("--interference", type=json_arg, default={},
                   help="the interference limits that flag a link's measurements")


def _run(args: argparse.Namespace) -> None:
    found = run(args.summary, args.links, args.toolchain, args.sweeps, args.anchors,
                args.drift, args.contexts, args.baseline, args.workers, args.out,
                args.whatif, args.points, args.tables, args.interference)
    print(f"findings: {len(found)} written to {args.out}")


STAGES = (Stage("findings", "what the run found, in sentences (findings.md)",
                _arguments, _run),)

