"""The what-if chart: predicted decode tok/s against link latency, per model and
context, with the run's own links drawn on the same axes.

Each curve is compare.whatif's prediction with the baseline link's bandwidth (latency
alone varies), its band the prediction's ±; each measured link is a point with its
measured ± and, hollow, its own prediction (its own latency and rates). A point that
disagrees with its prediction beyond their ± (whatif.measured_points: `off_curve`) is
ringed in red and says so in its tooltip. Where the curve is flat the link no longer
matters: the dotted rule marks the latency above which its round trips add more than
whatif.FELT_ABOVE of the step. With a service level (`slo:` tokens/s), a dashed grey
rule across each panel marks its target: where the curve crosses it a typical stream
just meets it (the slowest of the level's share need a little less latency:
`whatif --slo`).
"""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from splitbench.compare import whatif

NAME = "decode_sensitivity"
TITLE = "What if my link were X: decode against link latency"
QUESTION = ("How fast would this model decode on a link of another latency? The curve is "
            "predicted from this run's baseline step, round trips and bytes per token; "
            "the points are the links measured here. A flat curve: the link no longer "
            "matters.")
# The latency axis runs to at least this (µs), or past the slowest measured link.
AXIS_MIN_US = 3000.0
STEPS = 61


def curve_data(rows: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """The curve, its band and the flat-region rule, per pair, model and context."""
    if rows.empty:
        return pd.DataFrame()
    slowest = pd.to_numeric(points.get("rtt_us"), errors="coerce").max() if len(points) \
        else np.nan
    top = max(AXIS_MIN_US, 1.5 * slowest) if np.isfinite(slowest) else AXIS_MIN_US
    line = whatif.curve(rows, np.linspace(0, top, STEPS))
    line = line.assign(low=1000 / (line["predicted_ms"] + line["predicted_unc_ms"]),
                       high=1000 / (line["predicted_ms"] - line["predicted_unc_ms"])
                       .where(line["predicted_ms"] > line["predicted_unc_ms"]))
    return line[["pair", "model", "ctx", "rtt_us", "predicted_tps", "low", "high",
                 "round_trips", "round_trips_from"]]


def chart(rows: pd.DataFrame, points: pd.DataFrame, contexts: list[str],
          several_pairs: bool, width: int, height: int, target: float | None = None
          ) -> alt.TopLevelMixin:
    """The chart, faceted by model (and pair where there are several); `target`: the
    service level's tokens/s per stream, drawn as a rule."""
    line = curve_data(rows, points)
    if line.empty:
        frame = pd.DataFrame({"text": ["no baseline single-stream cell with a measured "
                                       "request-response latency: nothing to predict from"]})
        return alt.Chart(frame, title=TITLE).mark_text(size=14, color="#555").encode(
            text="text:N").properties(width=520, height=60)
    felt = rows.assign(felt_us=[whatif.felt_above_us(r) for _, r in rows.iterrows()])
    points = points.assign(
        low=points["measured_tps"] - points["measured_tps_unc"],
        high=points["measured_tps"] + points["measured_tps_unc"],
        predicted_tps=1000 / points["predicted_ms"],
        state=np.where(points["off_curve"].fillna(False).astype(bool),
                       "off its prediction (⚠)", "measured"))
    data = pd.concat([line.assign(part="curve"), points.assign(part="point"),
                      felt[["pair", "model", "ctx", "felt_us"]].assign(part="felt")],
                     ignore_index=True)
    x = alt.X("rtt_us:Q", title="link request-response latency, 64 B (µs)")
    colour = alt.Color("ctx:N", sort=contexts, title="context",
                       legend=alt.Legend(symbolOpacity=1))
    band = alt.Chart().mark_area(opacity=0.18).encode(
        x=x, y="low:Q", y2="high:Q", color=colour, detail="pair:N",
    ).transform_filter("datum.part == 'curve'")
    curve = alt.Chart().mark_line().encode(
        x=x, y=alt.Y("predicted_tps:Q", title="decode tok/s (predicted; points measured)"),
        color=colour, detail="pair:N",
        tooltip=["model:N", "ctx:N", alt.Tooltip("rtt_us:Q", format=".0f"),
                 alt.Tooltip("predicted_tps:Q", format=".1f"),
                 alt.Tooltip("round_trips:Q", format=".2f"), "round_trips_from:N"],
    ).transform_filter("datum.part == 'curve'")
    bars = alt.Chart().mark_rule().encode(
        x=x, y="low:Q", y2="high:Q", color=colour,
    ).transform_filter("datum.part == 'point'")
    dots = alt.Chart().mark_point(filled=True, size=70).encode(
        x=x, y="measured_tps:Q", shape=alt.Shape("link:N", title="measured link"),
        color=colour,
        tooltip=["link:N", "ctx:N", "state:N", alt.Tooltip("rtt_us:Q", format=".0f"),
                 alt.Tooltip("measured_tps:Q", format=".1f"),
                 alt.Tooltip("measured_tps_unc:Q", format=".1f", title="±"),
                 alt.Tooltip("predicted_tps:Q", format=".1f", title="its prediction")],
    ).transform_filter("datum.part == 'point'")
    # A red ring around a link that disagrees with its own prediction.
    off = alt.Chart().mark_point(filled=False, size=260, color="#c00", strokeWidth=2).encode(
        x=x, y="measured_tps:Q", tooltip=["link:N", "ctx:N", "state:N"],
    ).transform_filter("datum.part == 'point' && datum.state != 'measured'")
    predicted = alt.Chart().mark_point(filled=False, size=70, strokeDash=[2, 2]).encode(
        x=x, y="predicted_tps:Q", shape="link:N", color=colour,
    ).transform_filter("datum.part == 'point' && isValid(datum.predicted_tps)")
    rule = alt.Chart().mark_rule(strokeDash=[2, 3]).encode(
        x="felt_us:Q", color=colour, tooltip=["ctx:N", alt.Tooltip("felt_us:Q", format=".0f",
                                                     title="felt above (µs)")],
    ).transform_filter("datum.part == 'felt' && isValid(datum.felt_us)")
    layers = [band, curve, rule, bars, dots, off, predicted]
    if target is not None:
        data = pd.concat([data, rows[["pair", "model"]].drop_duplicates().assign(
            part="target", target_tps=target)], ignore_index=True)
        layers.append(alt.Chart().mark_rule(color="#666", strokeDash=[6, 4]).encode(
            y="target_tps:Q", tooltip=[alt.Tooltip("target_tps:Q", format="g",
                                                   title="service level (tok/s per stream)")],
        ).transform_filter("datum.part == 'target'"))
    facet = ({"row": alt.Row("pair:N"), "column": alt.Column("model:N")} if several_pairs
             else {"facet": alt.Facet("model:N", title="model"), "columns": 2})
    level = (f"; grey dashes: the service level's {target:g} tok/s per stream"
             if target is not None else "")
    return alt.layer(*layers, data=data).properties(
        width=width, height=height).facet(
        **facet, title=alt.TitleParams(
            TITLE, anchor="start",
            subtitle=f"curve: the baseline's bandwidth, ± shaded; dotted: the latency "
                     f"above which the link adds over {whatif.FELT_ABOVE:.0%} to the step; "
                     f"red ring: a link off its prediction{level}")
    ).resolve_scale(y="independent")


def build(summary: pd.DataFrame, whatif_rows: pd.DataFrame | None = None,
          whatif_points: pd.DataFrame | None = None, contexts: list[str] | None = None,
          width: int = 360, height: int = 220, levels: pd.DataFrame | None = None,
          **_: Any) -> alt.TopLevelMixin:
    rows = whatif_rows if whatif_rows is not None else pd.DataFrame(
        columns=whatif.MODEL_COLUMNS)
    points = whatif_points if whatif_points is not None else pd.DataFrame()
    several = "pair" in summary and summary["pair"].nunique() > 1
    return chart(rows, points, contexts or [], several, width, height, target_tps(levels))


def target_tps(levels: pd.DataFrame | None) -> float | None:
    """The service level's tokens/s per stream, where the run set one."""
    if levels is None or "tokens_per_s_target" not in levels:
        return None
    set_ = pd.to_numeric(levels["tokens_per_s_target"], errors="coerce").dropna()
    return float(set_.iloc[0]) if len(set_) else None
