"""What each link costs: decode per token (fixed or growing with context, and why:
round trips, bandwidth, or neither resolvable) and prefill against bandwidth, per model
and across models."""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np
import pandas as pd

from splitbench.compare import comparison, mechanisms, whatif
from splitbench.contracts.marks import FLAG_MARK
from splitbench.findings.text import (
    COMPARISON,
    DECODE_CHART,
    FIXED_SHARE,
    MECHANISMS,
    PREFILL,
    ROUND_TRIPS,
    SENSITIVITY,
    Finding,
    as_number,
    listed,
    ms_text,
    pm_text,
)
from splitbench.infra import intervals


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
        return Finding(section, f"{link}: no context has both its cell and the baseline's ok",
                       f", so what it costs decode is not measured "
                       f"({listed(lost) if lost else 'no cells'}).", (COMPARISON,))
    clear = ok[ok["decode_delta_unc_ms"].notna()
               & (ok["decode_delta_ms"].abs() > ok["decode_delta_unc_ms"])]
    unclear = ok[~ok.index.isin(clear.index)]
    # Faster than the baseline beyond the ±: no link can be, so that difference is the
    # machine's, never a saving the link brings (the table marks it too).
    faster = clear[clear["decode_delta_ms"] < 0]
    clear = clear[clear["decode_delta_ms"] > 0]
    impossible = _faster_than_baseline(faster) if len(faster) else ""
    if clear.empty and len(faster):
        return Finding(section, f"{link}: decode measured faster than the baseline, which "
                       "no link can be", f" ({impossible}): {MACHINE_MOVED}. {_advice(ok)}",
                       (COMPARISON, DECODE_CHART), flagged=True)
    if clear.empty:
        figures = listed([f"{r.ctx} {pm_text(r.decode_delta_ms, r.decode_delta_unc_ms)}"
                            for r in ok.itertuples()])
        return Finding(section, f"{link}: what it costs decode is not resolvable on this data",
                       f" ({figures} ms/token: each lies inside its ±). {_advice(ok)}",
                       (COMPARISON, DECODE_CHART))
    lead = clear.iloc[0]
    share = lead["decode_delta_ms"] / lead["decode_ms_per_token_base"] * 100
    figure = pm_text(lead["decode_delta_ms"], lead["decode_delta_unc_ms"])
    head = (f"{link} costs decode {figure} ms/token at {lead['ctx']} "
            f"({share:+.0f}% of a {lead['decode_ms_per_token_base']:.2f} ms step)")
    parts = []
    if len(faster):
        parts.append(f"{FLAG_MARK} It measured faster than the baseline at {impossible}, "
                     f"which no link can be: {MACHINE_MOVED}.")
    others = clear.iloc[1:]
    if len(others):
        parts.append("At " + listed([f"{r.ctx} {pm_text(r.decode_delta_ms, r.decode_delta_unc_ms)}"
                                       for r in others.itertuples()]) + ".")
    parts.append(_constancy(clear, unclear, ok))
    if lost:
        parts.append(f"Not measured at {listed(lost)}.")
    why = _why(lead)
    return Finding(section, head, "." + "".join(f" {p}" for p in [*parts, why] if p),
                   (COMPARISON, MECHANISMS, DECODE_CHART))


def _faster_than_baseline(rows: pd.DataFrame) -> str:
    """The contexts where a link measured faster than the baseline beyond its ±."""
    return listed([f"{r.ctx} {pm_text(r.decode_delta_ms, r.decode_delta_unc_ms)} ms/token"
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
        advice.append(f"more paired rounds at {listed(list(rows[paired]['ctx']))} "
                      "(cell.paired.rounds)")
    if (~paired).any():
        advice.append(f"pairing {listed(list(rows[~paired]['ctx']))} with the baseline "
                      "(cell.paired.contexts) or a quieter machine")
    return f"To resolve it: {' or '.join(advice)}."


# A cost is called "the same at every context" only where the most its contexts can
# differ (the upper end of their difference's 95% interval) is within this share of it
# (docs/method.md, "Thresholds"); otherwise the finding gives that bound.
EQUIVALENT_WITHIN = 0.25


def _constancy(clear: pd.DataFrame, unclear: pd.DataFrame, measured: pd.DataFrame) -> str:
    """Whether the resolved cost is the same at every context (a fixed per-step cost) or
    grows with context (bandwidth or the attention mask). `measured`: every context's
    row, shortest first (resolved or not)."""
    if len(clear) < 2:
        if unclear.empty:
            return ""
        figures = listed([f"{r.ctx} {pm_text(r.decode_delta_ms, r.decode_delta_unc_ms)}"
                            for r in unclear.itertuples()])
        return (f"Whether it stays the same at longer contexts is not resolvable on this "
                f"data ({figures}). {_advice(unclear)}")
    first, last = clear.iloc[0], clear.iloc[-1]
    d0, d1 = first["decode_delta_ms"], last["decode_delta_ms"]
    values, uncs = clear["decode_delta_ms"].to_numpy(), clear["decode_delta_unc_ms"].to_numpy()
    pairs = [(i, j) for i in range(len(values)) for j in range(i + 1, len(values))]
    gaps = [abs(values[i] - values[j]) for i, j in pairs]
    same = all(g <= np.hypot(uncs[i], uncs[j]) for g, (i, j) in zip(gaps, pairs, strict=True))
    # Differing is a claim made once per link and context of a run, as a disagreement
    # with a prediction is: it needs the same 3 combined standard errors. At 2, a 5k cell
    # measured after the short one read high often enough (3 of 7 default runs, each on
    # another link) to call a fixed cost growing.
    settled = same or any(g > comparison.agreement_allowance(uncs[i], uncs[j])
                          for g, (i, j) in zip(gaps, pairs, strict=True))
    lower = None if same else _longer_reads_lower(clear, measured)
    step0, step1 = first["decode_ms_per_token_base"], last["decode_ms_per_token_base"]
    steps = f"while the step grows {step1 / step0:.1f}× ({step0:.2f} → {step1:.2f} ms)"
    # "The same" is a bound, not an absence of evidence: the most the cost can change
    # from the shortest resolved context to the longest (the upper end of their
    # difference's 95% interval), and the word only where that bound is within
    # EQUIVALENT_WITHIN of the cost.
    bound = abs(d1 - d0) + float(np.hypot(uncs[0], uncs[-1]))
    if same and bound <= EQUIVALENT_WITHIN * abs(d0):
        text = (f"The same at every context it resolves, {steps}: the contexts differ by at "
                f"most {abs(bound):.2f} ms (within {EQUIVALENT_WITHIN:.0%} of its "
                f"{ms_text(d0)}), a fixed per-step cost, not one that grows with context.")
    elif lower is not None:
        text = f"Whether it grows with context is not settled: {lower}."
    elif same or not settled:
        # One wording for both ways of settling nothing (no difference beyond the ±,
        # or one short of 3 standard errors): the same cost drew each in turn over six
        # A/A runs, and the figures say how near each side it came.
        change = d1 - d0
        text = (f"Whether it grows with context is not settled, {steps}: from "
                f"{first['ctx']} to {last['ctx']} it changes by {change:+.2f} "
                f"±{float(np.hypot(uncs[0], uncs[-1])):.2f} ms (by up to {bound:.2f} ms, "
                f"95%), neither within {EQUIVALENT_WITHIN:.0%} of its {ms_text(d0)} (a "
                "fixed per-step cost) nor beyond the 3 combined standard errors a run's "
                "many comparisons need (a term that grows).")
    elif np.sign(d0) == np.sign(d1) and abs(d0) >= FIXED_SHARE * abs(d1):
        text = (f"Mostly a fixed per-step cost: {ms_text(d0)} of the {ms_text(d1)} at "
                f"{last['ctx']} is already there at {first['ctx']}, {steps}")
        growth = d1 - d0
        if abs(growth) > comparison.agreement_allowance(first["decode_delta_unc_ms"],
                                                        last["decode_delta_unc_ms"]):
            text += f"; {ms_text(growth)} grows with context (a bandwidth or mask term)"
        text += "."
    else:
        text = (f"It grows with context, from {ms_text(d0)} at {first['ctx']} to {ms_text(d1)} at "
                f"{last['ctx']}: a term that scales with context (the bytes of the attention "
                "mask or a growing transfer) outweighs any fixed per-step cost.")
    if len(unclear):
        text += (" Not resolvable at " + listed(
            [f"{r.ctx} ({pm_text(r.decode_delta_ms, r.decode_delta_unc_ms)})"
             for r in unclear.itertuples()]) + ".")
    return text


def _longer_reads_lower(clear: pd.DataFrame, measured: pd.DataFrame) -> str | None:
    """Where a longer context reads below the highest resolved cost beyond their combined
    ± (resolved or not), a cost that grows with context is contradicted by the run's own
    cells: the words that say so, else None. (A 5k cell that read +0.55 ±0.27 beside +0.06
    at short and +0.03 ±0.26 at 8k was called growing.)"""
    high = clear.loc[clear["decode_delta_ms"].idxmax()]
    after = measured.iloc[list(measured.index).index(high.name) + 1:]
    below = after[high["decode_delta_ms"] - after["decode_delta_ms"]
                  > np.hypot(high["decode_delta_unc_ms"], after["decode_delta_unc_ms"])]
    if below.empty:
        return None
    return (f"{pm_text(high['decode_delta_ms'], high['decode_delta_unc_ms'])} at "
            f"{high['ctx']} is above what the longer " + listed(
                [f"{r.ctx} reads ({pm_text(r.decode_delta_ms, r.decode_delta_unc_ms)})"
                 for r in below.itertuples()]) + " beyond their ±")


def _why(row: pd.Series) -> str:
    """The mechanism at the finding's lead context: round trips x the latency difference
    against the bandwidth term, which dominates, and whether the measured cost agrees."""
    latency, latency_unc = as_number(row.get("predicted_latency_ms")), as_number(
        row.get("predicted_latency_unc_ms"))
    bandwidth, bandwidth_unc = as_number(row.get("predicted_bandwidth_ms")), as_number(
        row.get("predicted_bandwidth_unc_ms"))
    trips, gap_us = as_number(row.get("round_trips")), as_number(row.get("latency_delta_us"))
    if not np.isfinite(latency):
        return ""  # said once for the model (round_trip_floor)
    source = row.get("round_trips_from")
    assumed = f" ({source})" if isinstance(source, str) and source.startswith("assumed") \
        else ""
    text = (f"That is {trips:.2f} round trips per token{assumed} × {gap_us:+.0f} µs of "
            f"extra request-response latency = {pm_text(latency, latency_unc)}")
    wait, wait_unc = (as_number(row.get(c)) for c in ("turn_wait_delta_us",
                                                      "turn_wait_delta_unc_us"))
    host_a = comparison.host_a_change(row)
    if np.isfinite(wait):
        text += (f" (its decode turns themselves waited {wait:+.0f}"
                 + (f" ±{wait_unc:.0f}" if np.isfinite(wait_unc) else "") + " µs more"
                 + (f", and host A's own time per token outside them changed by "
                    f"{host_a[0]:+.0f} ±{host_a[1]:.0f} µs" if host_a else "")
                 + ", from the packets)")
    if np.isfinite(bandwidth):
        text += (f"; the link's bandwidth adds {pm_text(bandwidth, bandwidth_unc)}: "
                 f"{_dominance_words(bandwidth, bandwidth_unc, latency, latency_unc)}")
    else:
        text += ("; the bandwidth term is unknown (no bytes per token or throughput "
                 "measured)")
    predicted, predicted_unc = as_number(row.get("predicted_decode_delta_ms")), as_number(
        row.get("predicted_decode_delta_unc_ms"))
    verdict = comparison.agrees(row["decode_delta_ms"], row["decode_delta_unc_ms"],
                                predicted, predicted_unc)
    if verdict is True:
        text += f". The measured {ms_text(row['decode_delta_ms'])} agrees with that prediction"
    elif verdict is False:
        uncalibrated = not np.isfinite(as_number(row.get("calibration_model_error_ms")))
        text += (f". ⚠ The measured {ms_text(row['decode_delta_ms'])} disagrees with the "
                 f"prediction {pm_text(predicted, predicted_unc)}"
                 + (" (its ± this run's figures alone: no A/A runs calibrated the model's "
                    "own error on this pair)" if uncalibrated else "")
                 + " beyond their ±: "
                 + (f"host A's own time per token changed by {host_a[0]:+.0f} µs, which no "
                    "latency term holds: something on host A differs between the links, "
                    "not only the wire (docs/method.md, \"Host A's own time\")" if host_a
                    else "something else differs between the links"))
    return text + "."


def _dominance_words(bandwidth: float, bandwidth_unc: float, latency: float,
                     latency_unc: float) -> str:
    verdict = mechanisms.dominance(bandwidth, bandwidth_unc, latency, latency_unc)
    return {"latency dominates": "latency dominates (the cost is round trips, not bytes)",
            "bandwidth dominates": "bandwidth dominates (the cost is the token's bytes, "
                                   "not round trips)"}.get(verdict, verdict)


def _extra_split(r: Any) -> str:
    """How a sweep's round trips above its counted turns split, by the same requests'
    packets (sweep_fit's split): the turns' waits and host A's own time per token, each
    per ms of latency. Both figures, no verdict: in the lab both grow a little (1-5% of
    the latency, docs/method.md), and which one resolves changes from run to run."""
    figures = [as_number(getattr(r, name, np.nan)) for name in (
        "waits_per_latency", "waits_per_latency_se", "a_time_per_latency",
        "a_time_per_latency_se", "split_dof")]
    if not all(np.isfinite(x) for x in figures[:4]):
        return "a cost each turn pays beyond the added latency"
    waits, waits_se, own, own_se, dof = figures
    dof = dof if np.isfinite(dof) and dof >= 1 else intervals.UNBOUNDED
    return (f"a cost each turn pays beyond the added latency: per ms of latency the turns' "
            f"waits grew {waits:.2f} ±{intervals.halfwidth(waits_se, dof):.2f} ms a token "
            f"and host A's own time outside them {own:+.2f} "
            f"±{intervals.halfwidth(own_se, dof):.2f} ms, from the packets")


def round_trip_floor(trips: pd.DataFrame, model_rows: pd.DataFrame, section: str,
                     split: str = "rpc") -> Finding | None:
    """The sweep's round trips per token against the topological floor (one per RPC
    worker), and the latency below which the model's decode does not feel the link.
    `split`: how the model was split (splits.SPLITS' key): a vLLM split's ranks have no
    RPC packets to count, and the finding says what its run does measure."""
    parts = []
    for r in trips.sort_values("workers").itertuples():
        dof = as_number(getattr(r, "round_trips_dof", np.nan))
        unc = intervals.halfwidth(as_number(r.round_trips_se),
                                  dof if np.isfinite(dof) else intervals.UNBOUNDED)
        figure = f"{r.round_trips:.2f}" + (f" ±{unc:.2f}" if np.isfinite(unc) else "")
        gap = r.round_trips - r.workers
        source = getattr(r, "round_trips_from", comparison.SWEEP)
        below = ("the sweep's latency figure reads more than a decode step pays"
                 if source == comparison.SWEEP else
                 "fewer turns than tokens were counted (a step that served two tokens, or "
                 "the count's first edge)")
        # Within its ± of the floor, or (no ±: one cell) where it rounds to it.
        at_floor = abs(gap) <= unc if np.isfinite(unc) else abs(gap) < 0.005
        counted = as_number(getattr(r, "turns_counted", np.nan))
        above = ("blocking transactions a better protocol could save"
                 if not np.isfinite(counted) or counted - r.workers > 0.05 else
                 f"yet the packets count {counted:.2f} turns per token, so the extra is no "
                 "transaction of its own but " + _extra_split(r))
        where = ("at the floor" if at_floor
                 else f"{gap:+.2f} above the floor: {above}" if gap > 0
                 else f"{-gap:.2f} below the floor: {below}")
        parts.append((f"{figure} round trips per token with {r.workers} RPC worker"
                      f"{'s' if r.workers > 1 else ''}",
                      f"{source}; the floor is {r.workers}: {where}"))
    head, text = "", ""
    if parts:
        head, text = parts[0][0], f" ({parts[0][1]})"
        if len(parts) > 1:
            text += "; " + "; ".join(f"{said} ({why})" for said, why in parts[1:])
        text += "."
    short = model_rows.iloc[0] if len(model_rows) else None
    felt = whatif.felt_above_us(short) if short is not None else np.nan
    if np.isfinite(felt):
        assumed = "assumed " if not parts else ""
        text += (f" Below ~{felt:.0f} µs of request-response latency this model's decode "
                 f"does not feel the link (its {assumed}{short['round_trips']:.2f} round "
                 "trips add "
                 f"under {whatif.FELT_ABOVE:.0%} to the {short['compute_ms']:.2f} ms of "
                 f"compute at {short['ctx']}).")
    if not parts:
        head = "Why a link costs what it does is not resolvable on this data"
    if not parts and split != "rpc":
        text = (": vLLM's ranks talk over connections of their own, whose turns splitbench "
                "neither sweeps nor counts, so this split's decode cost is not divided into round "
                "trips × latency and bandwidth; what it moves per token each way is "
                "measured (the backends table's bytes per token), and the link comparison "
                "gives its cost per link.")  # no latency it "does not feel": none assumed
    elif not parts:
        text = (": no round trips per token were measured for this model (neither a "
                "round-trip sweep, `roundtrips:`, nor the cells' RPC packets, which host A "
                "counts where it may open a packet socket: root, or the packet helper), so its "
                "decode cost cannot be split into round trips × latency and bandwidth." + text)
    return Finding(section, head, text.rstrip(), (ROUND_TRIPS, SENSITIVITY))


# --- prefill ----------------------------------------------------------------------------
def one_link(model_rows: pd.DataFrame, link: str, section: str) -> Finding | None:
    """A pair measured on one link: what that cannot answer, and the seed's links
    predicted from this run's own step, round trips and bytes per token at the shortest
    context (model_rows: whatif.model's rows of one pair and model, shortest first)."""
    if model_rows.empty:
        return None
    row = model_rows.iloc[:1]
    first = row.iloc[0]
    guesses = []
    for name, rtt_us, a_to_b, b_to_a in whatif.SEED_LINKS:
        seen = whatif.predict(row, rtt_us, a_to_b, b_to_a).iloc[0]
        guesses.append(f"{name} ({rtt_us:.0f} µs, {a_to_b:g}/{b_to_a:g} Gbit/s) "
                       f"{seen['predicted_ms']:.2f}" + (
                           f" ±{seen['predicted_unc_ms']:.2f}"
                           if np.isfinite(seen["predicted_unc_ms"]) else "")
                       + f" ms/token ({seen['predicted_tps']:.1f} tok/s)")
    assumed = "assumed " if str(first["round_trips_from"]).startswith("assumed") else ""
    head = f"One link measured ({link}), so no link is compared with another"
    return Finding(section, head, (
        ": this run cannot say from measurement what another cable costs, nor whether this one "
        "limits concurrency. From its own step at "
        f"{first['ctx']} ({first['decode_ms']:.2f} ms/token), its {assumed}"
        f"{first['round_trips']:.2f} round trips per token and its bytes per token, the "
        f"seed's links would decode at: {listed(guesses)} (each link's idle ping taken as "
        "its request-response latency, which a TCP turn pays at least: a lower bound). "
        "Add a second link to measure one."), (SENSITIVITY,))


def prefill(rows: pd.DataFrame, links: pd.DataFrame, fit: pd.Series | None, section: str
            ) -> Finding | None:
    """Prefill's elasticity to one-way bandwidth and each link's example (rows: the link
    comparison of one pair and model; fit: the mechanisms table's prefill row)."""
    examples = _prefill_examples(rows, links)
    if not examples:
        return None
    slope, unc = ((as_number(fit["slope"]), as_number(fit["±"])) if fit is not None
                  else (np.nan, np.nan))
    figure = f"elasticity {slope:.2f}" + (f" ±{unc:.2f}" if np.isfinite(unc) else "")
    said = "; ".join(e["text"] for e in examples)
    floor = min(e["gbps"] for e in examples)
    if np.isfinite(unc) and abs(slope) + unc < mechanisms.INSENSITIVE_BELOW:
        head = "Prefill no longer depends on the link's bandwidth at these rates"
        text = (f" ({figure}): {said}. From {floor:.2f} Gbit/s one way, prefill is bound by "
                "compute, not by the cable.")
    elif np.isfinite(slope) and np.isfinite(unc) and slope > unc and fit is not None \
            and not str(fit["verdict"]).startswith("not resolvable"):
        head = ("Prefill tracks one-way bandwidth" if slope >= mechanisms.TRACKS_ABOVE
                else "Prefill is partly bandwidth-bound")
        text = f" ({figure}): {said}."
    else:
        why = str(fit["verdict"]).split(": ", 1)[-1].split(" (")[0] if fit is not None \
            else "no fit"
        head = "Prefill's dependence on bandwidth is not resolvable on this data"
        text = (f" ({why}): {said}. Links of more different bandwidth, or longer prompts "
                "(prefill moves more bytes per second there), would resolve it.")
    return Finding(section, head, text, (PREFILL, COMPARISON, MECHANISMS))


class PrefillExample(TypedDict):
    """One link's prefill change (%) against its one-way bandwidth's (`_prefill_examples`)."""

    link: str
    text: str
    gbps: float
    bandwidth_pct: float
    longest_pct: float


def _prefill_examples(rows: pd.DataFrame, links: pd.DataFrame) -> list[PrefillExample]:
    """Per link: its one-way bandwidth against the baseline's and what prefill did at
    the longest context both measured (and the range over contexts)."""
    rates = links.reindex(columns=["pair", "link", "a_to_b_gbps"])
    out = []
    for link, group in rows.groupby("link", sort=False):
        ok = group[(group["status"] == "ok") & (group["status_base"] == "ok")
                   & group["prefill_change_pct"].notna()]
        pair = group["pair"].iloc[0]
        mine, base = (as_number(rates[(rates["pair"] == pair) & (rates["link"] == name)]
                                ["a_to_b_gbps"].max())
                      for name in (link, group["baseline"].iloc[0]))
        if ok.empty or not (np.isfinite(mine) and np.isfinite(base)):
            continue
        longest = ok.iloc[-1]
        change = (mine / base - 1) * 100
        bought = pm_text(longest["prefill_change_pct"], longest["prefill_change_unc_pct"],
                         "pct")
        text = (f"{link}'s {change:+.0f}% one-way bandwidth ({mine:.2f} against "
                f"{base:.2f} Gbit/s) {'buys' if longest['prefill_change_pct'] >= 0 else 'costs'}"
                f" {bought} prefill at {longest['ctx']}")
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
    return Finding("Across models", "", "Prefill, " + "; ".join(parts) + ".", (PREFILL,))


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
        text = (f"{link} {ms_text(deltas.min())} to {ms_text(deltas.max())} ms/token over "
                f"{first['model'].nunique()} models whose steps range "
                f"{steps.min():.2f}–{steps.max():.2f} ms")
        if np.sign(deltas.min()) == np.sign(deltas.max()) and \
                deltas.abs().max() / deltas.abs().min() < steps.max() / steps.min():
            text += ": the cost does not follow model speed (a per-step cost)"
        parts.append(text)
    if not parts:
        return None
    return Finding("Across models", "", "Decode, at each model's shortest resolved context: "
                   + "; ".join(parts) + ".", (COMPARISON,))
