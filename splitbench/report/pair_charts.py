"""The charts that put cells side by side: the pairs of machines (`pairs_chart`) and
one model shape under each backend's split (`backends_chart`)."""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from splitbench.compare import pairs, splits
from splitbench.report.chart_parts import chart_title, ctx_order, note_chart
from splitbench.report.contents import CHARTS

PAIR_MEASURES = [
    ("decode_ms_per_token", "decode_ms_unc", "decode ms/token"),
    ("prefill_tps", "prefill_tps_unc", "prefill tok/s"),
    ("ttft_ms", "ttft_ms_unc", "TTFT ms"),
    ("throughput_tps", "throughput_tps_unc", "tok/s, all streams"),
    ("overlap", "overlap_unc", "overlap"),
]
# Drawn on a log axis (they span orders of magnitude over contexts, and are positive):
# pairs a few percent apart stay apart at every context.
PAIR_LOG_MEASURES = {"decode ms/token", "prefill tok/s", "TTFT ms", "tok/s, all streams"}
PAIR_LINK_MEASURES = [
    ("a_to_b_gbps", "a_to_b_gbps_unc", "A→B Gbit/s"),
    ("b_to_a_gbps", "b_to_a_gbps_unc", "B→A Gbit/s"),
    ("rr64_p50_us", None, "RR 64 B p50 µs"),
    ("rr16k_p50_us", None, "RR 16 KB p50 µs"),
]


def _long(frame: pd.DataFrame, measures: list[tuple[str, str | None, str]],
          keys: list[str]) -> pd.DataFrame:
    """One row per (row of frame, measure) with a value: value, lo and hi (value ± its
    uncertainty; the value itself where none is known)."""
    parts = []
    for column, unc, title in measures:
        if column not in frame:
            continue
        value = pd.to_numeric(frame[column], errors="coerce")
        spread = pd.to_numeric(frame[unc], errors="coerce") if unc and unc in frame \
            else pd.Series(np.nan, index=frame.index)
        part = frame[keys].assign(measure=title, value=value,
                                  unc=spread, lo=value - spread.fillna(0),
                                  hi=value + spread.fillna(0))
        parts.append(part[np.isfinite(part["value"])])
    if not parts:
        return pd.DataFrame(columns=[*keys, "measure", "value", "unc", "lo", "hi"])
    return pd.concat(parts, ignore_index=True)


def _pair_points(x: alt.X, order: list[str], pair_scale: alt.Scale,
                 tooltip: list, axis: str | None = None, log: bool = False,
                 by: str = "pair") -> list[alt.Chart]:
    """Each pair's (or `by`'s) figure as a point (a flagged one as a triangle), its ± as
    a bar, side by side within each x."""
    offset = alt.XOffset(f"{by}:N", sort=order)
    colour = alt.Color(f"{by}:N", title=by, scale=pair_scale)
    scale = alt.Scale(type="log") if log else alt.Scale(zero=False)
    bars = alt.Chart().mark_rule(strokeWidth=2).encode(
        x=x, xOffset=offset, y=alt.Y("lo:Q", title=axis, scale=scale),
        y2="hi:Q", color=colour)
    dots = alt.Chart().mark_point(filled=True, size=50).encode(
        x=x, xOffset=offset, y=alt.Y("value:Q", title=axis, scale=scale), color=colour,
        shape=alt.Shape("flag:N", title="cell", scale=alt.Scale(
            domain=["ok", "flagged"], range=["circle", "triangle-up"])),
        tooltip=tooltip)
    return [bars, dots]


def pairs_chart(summary: pd.DataFrame, links: pd.DataFrame, baseline: str = "",
                **_: Any) -> alt.TopLevelMixin:
    """Every pair's figures side by side on each model, context and concurrency two or
    more pairs measured (compare.pairs.compare): one row of panels per measure, one
    column per link (and model), a colour per pair, ± as bars, flagged cells as
    triangles; below, each pair's links as the link checks measured them."""
    name = "pairs"
    names = pairs.pairs_of(summary)
    if len(names) < 2:
        return note_chart(CHARTS[name][0], f"one pair in this run ({names[0]}): no other pair "
                     "to compare it with" if names else "no cells: no pairs to compare")
    order = ctx_order(summary)
    comp = pairs.compare(summary, links, order, baseline or None)
    if comp.empty:
        return note_chart(CHARTS[name][0], f"no model, context and concurrency measured on two "
                                      f"or more of the pairs ({', '.join(names)})")
    ok = comp[comp["status"] == "ok"]
    failed = comp[comp["status"] != "ok"]
    several_models = comp["model"].nunique() > 1
    cells = ok.assign(
        panel=ok["model"] + " · " + ok["link"] if several_models else ok["link"],
        cell=ok["ctx"].astype(str) + " ×" + ok["conc"].astype(str),
        flag=np.where(ok["flags"].map(lambda f: isinstance(f, str) and bool(f)),
                      "flagged", "ok"),
        flags=ok["flags"].map(lambda f: f if isinstance(f, str) else ""))
    long = _long(cells, PAIR_MEASURES, ["pair", "link", "model", "ctx", "conc", "panel",
                                        "cell", "flag", "flags", "uncertainty_from"])
    if long.empty:
        return note_chart(CHARTS[name][0], "every cell the pairs share failed: see the pairs "
                                      "table")
    cell_order = list(dict.fromkeys(
        f"{c} ×{n}" for c in order for n in sorted(comp["conc"].unique())))
    panels = list(dict.fromkeys(cells.sort_values(["model"], kind="stable")["panel"]))
    pair_scale = alt.Scale(domain=names)
    tooltip = ["pair:N", "link:N", "model:N", "ctx:N", "conc:O", "measure:N",
               alt.Tooltip("value:Q", format=".3f"),
               alt.Tooltip("unc:Q", title="±", format=".3f"),
               alt.Tooltip("uncertainty_from:N", title="± from"),
               alt.Tooltip("flags:N", title="flags")]
    # The same context × concurrency slots in every row, so that the rows line up.
    present = [c for c in cell_order if c in set(long["cell"])]
    x = alt.X("cell:N", sort=present, title="context × concurrency",
              scale=alt.Scale(domain=present), axis=alt.Axis(labelAngle=0))
    rows = []
    for measure in [m[2] for m in PAIR_MEASURES]:
        mine = long[long["measure"] == measure]
        if mine.empty:
            continue
        log = measure in PAIR_LOG_MEASURES and bool((mine["value"] > 0).all())
        if log:  # a ± reaching zero or below runs to the foot of the axis
            mine = mine.assign(lo=mine["lo"].where(mine["lo"] > 0, mine["value"] / 100))
        first = not rows
        rows.append(alt.layer(*_pair_points(x, names, pair_scale, tooltip, measure, log),
                              data=mine).properties(
            width=max(120, 22 * len(names) * long["cell"].nunique()), height=130
        ).facet(
            column=alt.Column(
                "panel:N", sort=panels,
                title=("model · link" if several_models else "link") if first else None,
                header=alt.Header(labels=first)),
        ))
    top = alt.vconcat(*rows)
    facts = pairs.link_facts(links)
    facts = facts[facts["pair"].isin(names)].assign(
        flag=lambda f: np.where(f["link_flags"].map(lambda v: isinstance(v, str) and
                                                    bool(v)), "flagged", "ok"),
        flags=lambda f: f["link_flags"].map(lambda v: v if isinstance(v, str) else ""),
        uncertainty_from="link checks")
    link_long = _long(facts, PAIR_LINK_MEASURES, ["pair", "link", "flag", "flags",
                                                  "uncertainty_from"])
    link_x = alt.X("link:N", title="link", axis=alt.Axis(labelAngle=0),
                   sort=sorted(facts["link"].unique(), key=lambda k: (k != baseline, k)))
    link_tooltip = ["pair:N", "link:N", "measure:N", alt.Tooltip("value:Q", format=".3f"),
                    alt.Tooltip("unc:Q", title="±", format=".3f"),
                    alt.Tooltip("flags:N", title="flags")]
    subtitle = ("each pair's own figures, ± = 95% interval (bars); triangles: "
                "flagged cells or links (see the pairs table); below: the links as "
                "their checks measured them")
    if len(failed):
        shown = [f"{r.pair}/{r.link}/{r.model}/{r.ctx}x{r.conc}: {r.status}"
                 for r in failed.itertuples()]
        subtitle += "; not drawn (failed): " + ", ".join(shown[:6]) + (
            f" and {len(shown) - 6} more" if len(shown) > 6 else "")
    if link_long.empty:
        return top.properties(title=chart_title(name, subtitle))
    bottom = alt.layer(*_pair_points(link_x, names, pair_scale, link_tooltip),
                       data=link_long).properties(
        width=max(120, 22 * len(names) * link_long["link"].nunique()), height=120
    ).facet(
        column=alt.Column("measure:N", title=None,
                          sort=[m[2] for m in PAIR_LINK_MEASURES]),
    ).resolve_scale(y="independent")
    return alt.vconcat(top, bottom, title=chart_title(name, subtitle))


BACKEND_MEASURES = PAIR_MEASURES[:3] + [("overlap", "overlap_unc", "overlap"),
                                        ("rpc_bytes_per_token_b_to_a", None,
                                         "bytes/token B→A")]


def backends_chart(summary: pd.DataFrame, baseline: str = "", **_: Any
                   ) -> alt.TopLevelMixin:
    """One model shape's splits side by side (compare.splits.compare): one row of
    panels per measure, one column per link (and shape, and pair when there are
    several), a colour per split, ± as bars, flagged cells as triangles."""
    name = "backends"
    order = ctx_order(summary)
    comp = splits.compare(summary, order, baseline or None)
    if comp.empty:
        return note_chart(CHARTS[name][0], "no model shape measured with two or more splits "
                                      f"({', '.join(splits.split_labels().values())}) "
                                      "in this run")
    ok = comp[comp["status"] == "ok"]
    failed = comp[comp["status"] != "ok"]
    split_names = list(splits.split_labels().values())
    several = comp["model_shape"].nunique() > 1 or comp["pair"].nunique() > 1
    cells = ok.assign(
        split=ok["split"].map(splits.split_name),
        panel=(ok["model_shape"] + " · " + ok["pair"] + " · " + ok["link"]) if several
        else ok["link"],
        cell=ok["ctx"].astype(str) + " ×" + ok["conc"].astype(str),
        flag=np.where(ok["flags"].map(lambda f: isinstance(f, str) and bool(f)),
                      "flagged", "ok"),
        flags=ok["flags"].map(lambda f: f if isinstance(f, str) else ""))
    long = _long(cells, BACKEND_MEASURES, ["split", "model", "link", "ctx", "conc",
                                           "panel", "cell", "flag", "flags"])
    if long.empty:
        return note_chart(CHARTS[name][0], "every cell of the compared splits failed: see the "
                                      "backends table")
    present = [f"{c} ×{n}" for c in order for n in sorted(comp["conc"].unique())
               if f"{c} ×{n}" in set(long["cell"])]
    x = alt.X("cell:N", sort=present, title="context × concurrency",
              scale=alt.Scale(domain=present), axis=alt.Axis(labelAngle=0))
    scale = alt.Scale(domain=[s for s in split_names if s in set(long["split"])])
    tooltip = ["split:N", "model:N", "link:N", "ctx:N", "conc:O", "measure:N",
               alt.Tooltip("value:Q", format=".3f"), alt.Tooltip("unc:Q", title="±",
                                                                   format=".3f"),
               alt.Tooltip("flags:N", title="flags")]
    panels = list(dict.fromkeys(cells.sort_values(["link"], key=lambda s: s != baseline,
                                                  kind="stable")["panel"]))
    rows = []
    for measure in [m[2] for m in BACKEND_MEASURES]:
        mine = long[long["measure"] == measure]
        if mine.empty:
            continue
        log = measure in PAIR_LOG_MEASURES and bool((mine["value"] > 0).all())
        if log:
            mine = mine.assign(lo=mine["lo"].where(mine["lo"] > 0, mine["value"] / 100))
        rows.append(alt.layer(*_pair_points(x, scale.domain, scale, tooltip, measure, log,
                                            by="split"), data=mine).properties(
            width=max(180, 48 * len(present)), height=140
        ).facet(column=alt.Column("panel:N", sort=panels, title=None)))
    subtitle = "± = 95% interval (bars); triangles: flagged cells (see the " \
               "backends table)"
    if len(failed):
        shown = [f"{r.link}/{r.model}/{r.ctx}x{r.conc}: {r.status}"
                 for r in failed.itertuples()]
        subtitle += "; not drawn (failed): " + ", ".join(shown[:6]) + (
            f" and {len(shown) - 6} more" if len(shown) > 6 else "")
    return alt.vconcat(*rows, title=chart_title(name, subtitle))
