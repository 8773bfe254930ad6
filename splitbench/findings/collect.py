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

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from splitbench import backends
from splitbench.compare import comparison, mechanisms
from splitbench.contracts.slices import InterferenceLimits
from splitbench.findings import glance, written
from splitbench.findings import service_levels as level_findings
from splitbench.findings import splits as split_findings
from splitbench.findings import tails as tail_findings
from splitbench.findings.costs import (
    decode_across_models,
    decode_cost,
    one_link,
    prefill,
    prefill_across_models,
    round_trip_floor,
)
from splitbench.findings.text import (
    BOUNDARY,
    CHECKS,
    COMPARISON,
    LINKS,
    ON_PAR,
    OVERLAP,
    OVERLAP_HIGH,
    OVERLAP_LOW,
    SENSITIVITY,
    Finding,
    as_number,
    fixed,
    flags_of,
    listed,
    marked,
    ms_text,
)
from splitbench.health import checks
from splitbench.summary.cell_summary import by_length, link_flags, pick_baseline, read_links


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
            head = "Usable concurrency differs between links"
            text = (f": at {ctx}, " + listed(
                [f"{link} {_boundary_text(per[(link, ctx)])}" for link in links
                 if (link, ctx) in per]) + (f" (and at {listed(differ[1:])})"
                                            if len(differ) > 1 else "") + ".")
        else:
            reference = links[0]
            levels = "; ".join(f"{ctx} {_boundary_text(per[(reference, ctx)])}"
                               for ctx in order if (reference, ctx) in per)
            failed = any(per[(reference, ctx)][1] is not None for ctx in order
                         if (reference, ctx) in per)
            whose = f"all {len(links)} links" if len(links) > 1 else f"the one link ({reference})"
            head = f"Usable concurrency is the same on {whose}"
            text = (f": {levels} streams."
                    + (" Where it stops, it stops alike on every link: the limit is memory "
                       "or compute, not the link." if failed and len(links) > 1 else
                       " Every level measured is usable: the boundary lies above them."
                       if not failed else ""))
        out.append(Finding(section, head, text, (BOUNDARY,)))
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
                           is True else as_number(getattr(r, "overlap_unc", np.nan)))
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
        head = f"{top}-way overlap: {figures}"
        tail = ("; each cell is one release, so whether it differs between links is not "
                "resolvable on this data (more releases per cell would resolve it)"
                if len(links) > 1 else f" (measured on {links[0]} only)")
    elif differences:
        head = f"{top}-way overlap differs between links"
        tail = f" beyond their ±: {'; '.join(differences)}"
    else:
        head = f"{top}-way overlap is the same on every link within its ±"
        tail = f" ({figures})"
    text = tail + "."
    if unc_column is not None and many[unc_column].notna().any():
        once = many["releases"] if "releases" in many else pd.Series(np.nan, many.index)
        bare = [ctx for ctx in order if len(here := once[(many["ctx"] == ctx)
                                                         & (many["conc"] == top)])
                and (here == 1).all()]
        if bare:
            text += (f" At {listed(bare)} each cell is one release (its ± only a lower "
                     "bound): whether links differ there is not resolvable on this data "
                     "(cell.concurrent_releases would resolve it).")
    if collapse:
        where = "on every link" if len(links) > 1 else f"on {links[0]}"
        text += (f" It falls from {fixed(shortest.min())} or more at {order[0]} to "
                 f"{fixed(longest.max())} or less at {order[-1]} {where}: long prompts' "
                 "prefill runs one slot at a time, whatever the link.")
    return Finding(section, head, text, (OVERLAP, BOUNDARY))


def _pm2(value: float, unc: float) -> str:
    return fixed(value) + (f" ±{unc:.2f}" if np.isfinite(unc) else "")


# --- the links ----------------------------------------------------------------------------
def link_facts(links: pd.DataFrame, baseline: str | None) -> list[tuple[Finding, str]]:
    """Per link, (its finding, the link): one way against both ways at once, asymmetry,
    and the fixed part of a request-response (the seed's "bidirectional total 29%
    lower", "326 µs fixed")."""
    out = []
    for _, r in links.iterrows():
        if r.get("status") == "failed":
            continue
        a, b, both = (as_number(r.get(c)) for c in ("a_to_b_gbps", "b_to_a_gbps", "bidir_gbps"))
        if not (np.isfinite(a) and np.isfinite(b)):
            continue
        head, text = f"{r['link']}: {a:.2f} Gbit/s A→B and {b:.2f} B→A", ""
        lan = r.get("lan_hosts")
        if isinstance(lan, str) and lan:
            text += (f" (the LAN of host{'s' * (' and ' in lan)} {lan}, compared as it is: "
                     "nothing on it changed, "
                     "only the other host let through to the run's ports)")
        spread = max(as_number(r.get("a_to_b_gbps_max")) - as_number(r.get("a_to_b_gbps_min")),
                     as_number(r.get("b_to_a_gbps_max")) - as_number(r.get("b_to_a_gbps_min")))
        allowed = spread if np.isfinite(spread) and spread > 0 else ON_PAR * max(a, b)
        text += (f" (asymmetric by {abs(a - b) / max(a, b):.0%})" if abs(a - b) > allowed
                 else "")
        if np.isfinite(both):
            text += (f"; both ways at once {both:.2f} in total, "
                     f"{1 - both / (a + b):.0%} below the two one-way rates added")
            base = links[links["link"] == baseline]
            if len(base) and r["link"] != baseline:
                ba, bb, bboth = (as_number(base.iloc[0].get(c)) for c in
                                 ("a_to_b_gbps", "b_to_a_gbps", "bidir_gbps"))
                on_par = all(np.isfinite(x) and abs(x / y - 1) <= ON_PAR
                             for x, y in ((a, ba), (b, bb)))
                if on_par and np.isfinite(bboth) and abs(both / bboth - 1) > ON_PAR:
                    text += (f": one way on par with {baseline}, but both ways "
                             f"{abs(both / bboth - 1):.0%} "
                             f"{'lower' if both < bboth else 'higher'} ({bboth:.2f})")
        p50, fixed = as_number(r.get("rr16k_p50_us")), as_number(r.get("rr_fixed_us"))
        if np.isfinite(p50):
            text += f"; a 16 KB request-response takes {p50:.0f} µs at the median"
            if np.isfinite(fixed):
                text += f", {fixed:.0f} µs of it fixed (the intercept over message sizes)"
        out.append((Finding("The links", head, text + ".", (LINKS,)), r["link"]))
    return out


# --- what did not work, and how far to trust the rest ----------------------------------
def failures(lines: Sequence[tuple[str, str]]) -> list[Finding]:
    """The checks that failed (a toolchain, a link, a launch, a check that did not run),
    first in the findings."""
    return [Finding("What did not work", "", text, (CHECKS,), failed=True)
            for state, text in lines if state == "failed"]


def trust(lines: Sequence[tuple[str, str]], comp: pd.DataFrame) -> list[Finding]:
    """The flagged checks, said once (the cells they concern carry ⚠ in the tables), and
    whether some differences' ± are lower bounds."""
    section = "How far to trust these figures"
    out = [Finding(section, "", text, (CHECKS,), flagged=True)
           for state, text in lines if state == "flagged"]
    lower = comp[comp["decode_lower_bound"].fillna(False).astype(bool)
                 & (comp["status"] == "ok")] if "decode_lower_bound" in comp else comp[:0]
    if len(lower):
        out.append(Finding(section, "", (
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
                                    as_number(r.get("predicted_decode_delta_ms")),
                                    as_number(r.get("predicted_decode_delta_unc_ms")))
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
        abs(a - b) <= comparison.agreement_allowance(sa, sb)
        for i, (a, sa) in enumerate(zip(values, spread, strict=True))
        for b, sb in zip(values[i + 1:], spread[i + 1:], strict=True))
    if not shared:
        return None
    where = listed(sorted({f"{g[0]} at {g[1]}" for g in gaps}))
    head = (f"{where} all differ from their predictions by the same {ms_text(values.min())} "
            f"to {ms_text(values.max())} ms/token: one offset shared by every link, not each "
            "link's own cost. ")
    off = {(g[0], g[1]) for g in gaps}
    host_a = [comparison.host_a_change(r) for _, r in rows.iterrows()
              if (r["link"], r["ctx"]) in off]
    changes = [h[0] for h in host_a if h is not None]
    if host_a and len(changes) == len(host_a) and all(
            np.sign(c) == np.sign(values[0]) for c in changes):
        return Finding("How far to trust these figures", "", head + (
            f"The packets place it on host A: its own time per token, outside the turns "
            f"that wait for B, changed by {min(changes):+.0f} to {max(changes):+.0f} µs on "
            "every link against the baseline, which no latency term holds. Their order and "
            "the round trips stand; what differs is how host A works beside each link "
            "(docs/method.md, \"Host A's own time\")."), (COMPARISON, SENSITIVITY), flagged=True)
    return Finding("How far to trust these figures", "", head + (
        "It points at what every comparison shares, the baseline or the way "
        "latency is measured (the links' 64 B request-response probe against what a decode "
        "step's messages pay), not at the links; their order and the round trips stand, "
        "their predicted cost is off by that much."), (COMPARISON, SENSITIVITY),
        flagged=True)


# --- all together -------------------------------------------------------------------------
def collect(summary: pd.DataFrame, links: pd.DataFrame, comp: pd.DataFrame,
            trips: pd.DataFrame, mechanism_rows: pd.DataFrame, model_rows: pd.DataFrame,
            contexts: Sequence[str], baseline: str | None,
            check_lines: Sequence[tuple[str, str]] = (),
            tails: pd.DataFrame | None = None,
            service: tuple[pd.DataFrame | None, dict] = (None, {})) -> list[Finding]:
    """Every finding of a run, in the order they are read. `comp`: compare_links rows
    with predicted_decode_delta's columns beside them; `trips`: comparison.round_trips;
    `mechanism_rows`: mechanisms.table; `model_rows`: whatif.model; `tails`:
    tail_shift.table; `service`: service_levels.table and the config's slo:."""
    out = failures(check_lines)
    # A shape split two or more ways opens with how the splits compare.
    out += split_findings.findings(summary, comp, list(contexts), baseline)
    pairs = summary["pair"].nunique() > 1
    order = {c: i for i, c in enumerate(contexts)}
    comp = comp.assign(_order=comp["ctx"].map(order)).sort_values(
        ["pair", "model", "link", "_order"]).drop(columns="_order")
    for (pair, model), cells in summary.groupby(["pair", "model"], sort=False):
        section = f"{model} on {pair}" if pairs else str(model)
        mine = comp[(comp["pair"] == pair) & (comp["model"] == model)]
        my_trips = trips[(trips["pair"] == pair) & (trips["model"] == model)]
        # A verdict that splits a cost into round trips and bytes rests on the sweep too.
        swept = sweep_flags(my_trips)
        for link, rows in mine.groupby("link", sort=False):
            used = rows[(rows["status"] == "ok") & (rows["status_base"] == "ok")]
            out.append(marked(decode_cost(rows, str(link), section),
                              flags_of(used) + swept, among=len(used)))
        for link, rows in _tail_rows(tails, pair, model, order):
            out.append(marked(tail_findings.finding(rows, link, section),
                              flags_of(_tail_cells(cells, rows, link), ("flags",))))
        floor = round_trip_floor(
            my_trips,
            model_rows[(model_rows["pair"] == pair) & (model_rows["model"] == model)]
            .assign(_order=lambda f: f["ctx"].map(order)).sort_values("_order"), section,
            _split_of(cells))
        if floor:
            out.append(marked(floor, swept, "round-trip sweeps"))
        measured_links = cells["link"].unique()
        if len(measured_links) == 1:
            alone = one_link(model_rows[(model_rows["pair"] == pair)
                                        & (model_rows["model"] == model)]
                             .assign(_order=lambda f: f["ctx"].map(order))
                             .sort_values("_order"), str(measured_links[0]), section)
            if alone:
                out.append(marked(alone, flags_of(cells[cells["conc"] == 1], ("flags",)),
                                  among=int((cells["conc"] == 1).sum())))
        fit = _mechanism_row(mechanism_rows, pair, model, "prefill")
        found = prefill(mine, links[links["pair"] == pair] if "pair" in links else links,
                        fit, section)
        if found:
            used = mine[(mine["status"] == "ok") & (mine["status_base"] == "ok")]
            out.append(marked(found, flags_of(used), among=len(used)))
        for found in concurrency(cells, contexts, section):
            # The overlap rests on the concurrent cells; the boundary on every level.
            rests_on = cells[cells["conc"] > 1] if found.refs[0] == OVERLAP else cells
            out.append(marked(found, flags_of(rests_on, ("flags",)), among=len(rests_on)))
        levels, slo = service
        if levels is not None and not levels.empty:
            mine_levels = levels[(levels["pair"] == pair) & (levels["model"] == model)]
            out += [marked(found, flags_of(cells[cells["ctx"] == ctx], ("flags",)))
                    for ctx, found in level_findings.findings(mine_levels, contexts, slo,
                                                              section, baseline)]
    # Drawn from every model's comparisons: flagged where any of those it used is.
    used = comp[(comp["status"] == "ok") & (comp["status_base"] == "ok")]
    out += [marked(f, flags_of(used), among=len(used))
            for f in (decode_across_models(comp), prefill_across_models(comp, links)) if f]
    for pair, facts in links.groupby("pair", sort=False) if "pair" in links else []:
        found = [marked(f, flags_of(facts[facts["link"] == link], ("flags",)),
                        "link measurements")
                 for f, link in link_facts(facts, baseline)]
        if pairs:
            for f in found:
                f.section = f"The links of {pair}"
        out += found
    return out + trust(check_lines, comp)


def _tail_cells(cells: pd.DataFrame, rows: pd.DataFrame, link: str) -> pd.DataFrame:
    """The single-stream cells a link's tail finding rests on: its own, and the
    baseline link's at each context where its gaps were held to them (not paired)."""
    single = cells[cells["conc"] == 1]
    held = rows[(rows["conc"] == 1) & ~rows["paired"].astype(bool)]
    base = single[(single["link"] == rows["baseline"].iloc[0])
                  & single["ctx"].isin(held["ctx"])] if len(rows) else single.iloc[:0]
    return pd.concat([single[single["link"] == link], base])


def _split_of(cells: pd.DataFrame) -> str:
    """How a model's cells were split (a backend's split; the default backend's for
    cells measured before cells recorded theirs)."""
    named = cells["split"].dropna() if "split" in cells else pd.Series([], dtype=object)
    return str(named.iloc[0]) if len(named) else backends.default_split()


def _tail_rows(tails: pd.DataFrame | None, pair: str, model: str, order: dict[str, int]
               ) -> list[tuple[str, pd.DataFrame]]:
    """tail_shift's rows of one pair and model, per link, shortest context first."""
    if tails is None or tails.empty:
        return []
    mine = tails[(tails["pair"] == pair) & (tails["model"] == model)]
    mine = mine.assign(_order=mine["ctx"].map(order)).sort_values("_order")
    return [(str(link), rows) for link, rows in mine.groupby("link", sort=False)]


def sweep_flags(trips: pd.DataFrame) -> list[tuple[str, str]]:
    """(where, why) for each flagged round-trip sweep among `trips`
    (comparison.round_trips' rows)."""
    if "flags" not in trips:
        return []
    return [(f"the {int(r.workers)}-worker sweep", str(r.flags).split("; ")[0])
            for r in trips.itertuples() if isinstance(r.flags, str) and r.flags]


def _mechanism_row(rows: pd.DataFrame, pair: str, model: str, mechanism: str
                   ) -> pd.Series | None:
    if rows is None or rows.empty:
        return None
    mine = rows[(rows["model"] == model) & (rows["mechanism"] == mechanism)]
    if "pair" in rows:
        mine = mine[mine["pair"] == pair]
    return mine.iloc[0] if len(mine) else None


# --- the `findings` stage -----------------------------------------------------------------
def run(summary_path: str, comparison_path: str, whatif_path: str, link_files: list[str],
        toolchain_files: list[str], sweep_files: list[str], drift_path: str | None,
        contexts: dict[str, int], baseline_link: str | None, out: str, data_out: str,
        tables_dir: str | None = None,
        interference_limits: InterferenceLimits | None = None,
        tails_path: str | None = None, levels_path: str | None = None,
        slo: dict | None = None) -> list[Finding]:
    summary = pq.read_table(summary_path).to_pandas()
    tails, levels = (pd.read_parquet(path) if path and Path(path).exists() else None
                     for path in (tails_path, levels_path))
    links = read_links(link_files)
    # A link measured while other work used the CPUs is flagged as its table flags it.
    links["flags"] = link_flags(links, interference_limits)
    order = by_length(contexts)
    base = pick_baseline(summary, baseline_link)
    trips = comparison.round_trips(sweep_files, summary, interference_limits)
    comp = pd.read_parquet(comparison_path)
    mechanism_rows = mechanisms.table(summary, comp, links, order)
    model_rows = pd.read_parquet(whatif_path)
    toolchains = [json.loads(Path(p).read_text()) for p in toolchain_files]
    lines = checks.check_lines(summary, drift_path, links, toolchains)
    if tables_dir:
        lines += [line for line in checks.flagged_tables(tables_dir) if line[0] != "ok"]
    found = collect(summary, links, comp, trips, mechanism_rows, model_rows, order, base,
                    lines, tails, (levels, slo or {}))
    written.write(found, glance.figures(comp, order), order, out, data_out)
    return found
