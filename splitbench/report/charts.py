"""Charts: one per question a reader of the results asks.

Each chart is built from the summary (one row per cell), the link results and, for
the token timeline, one cell's token Parquet. Every builder returns an altair chart
and copes with failed cells (null figures), a single link and an empty run: what it
cannot draw, it says in a note instead of failing the workflow.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import altair as alt
import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from splitbench.compare import traffic
from splitbench.contracts import results
from splitbench.report import sensitivity, vega
from splitbench.report.chart_parts import (
    HEIGHT,
    WIDTH,
    by_context,
    by_pair_and_model,
    chart_title,
    ctx_axis,
    ctx_order,
    finite,
    link_colours,
    note_chart,
    single_stream_chart,
    single_stream_rows,
    where_title,
    with_where,
)
from splitbench.report.contents import CHARTS
from splitbench.report.pair_charts import backends_chart, pairs_chart
from splitbench.summary import cell_summary, releases

# The latency the decode-vs-latency fit uses, the mechanisms table's: the probe's fixed
# request-response overhead (a decode step moves a few KB per transaction, where the
# fixed cost dominates), else the 16 KB p50. Axis titles:
LATENCY_COLUMNS = {"rr_fixed_us": "request-response fixed overhead",
                   "rr16k_p50_us": "16 KB request-response p50"}
# A timeline of more ticks than this is thinned per stream (every k-th token) so the
# chart stays readable and the page small.
TIMELINE_MAX_TOKENS = 4000


def decode_ms_per_token(summary: pd.DataFrame, **_: Any) -> alt.TopLevelMixin:
    return single_stream_chart(summary, "decode_ms_per_token",
                                "decode ms/token (lower is better)",
                                "no single-stream cell decoded")


def delta_vs_baseline(summary: pd.DataFrame, comp: pd.DataFrame) -> pd.DataFrame:
    """Per pair, model and context: each other link's decode ms/token minus the
    baseline's, as the link comparison table has it (`comp`: the run's comparison,
    paired where the cell was)."""
    comp = comp[(comp["status"] == "ok") & (comp["status_base"] == "ok")]
    ctx_tokens = summary.drop_duplicates("ctx").set_index("ctx")["ctx_tokens"] \
        if "ctx_tokens" in summary else pd.Series(dtype=float)
    out = comp.assign(delta_ms=comp["decode_delta_ms"],
                      ctx_tokens=comp["ctx"].map(ctx_tokens))
    # What the chart draws and its tooltip shows: the page embeds these rows.
    out = out.reindex(columns=["pair", "link", "model", "ctx", "ctx_tokens", "delta_ms"])
    return with_where(out[out["delta_ms"].notna()])


def decode_delta(summary: pd.DataFrame, baseline: str = "",
                 comparison: pd.DataFrame | None = None, **_: Any) -> alt.TopLevelMixin:
    name = "decode_delta"
    if comparison is None:
        return note_chart(CHARTS[name][0], "no link comparison was given")
    data = delta_vs_baseline(summary, comparison)
    if data.empty:
        why = (f"no link to compare with the baseline '{baseline}'"
               if summary["link"].nunique() <= 1 else
               f"no context where both '{baseline}' and another link decoded")
        return note_chart(CHARTS[name][0], why)
    zero = alt.Chart().mark_rule(color="#888", strokeDash=[4, 3]).encode(y=alt.datum(0))
    return by_context(data, "delta_ms", f"Δ ms/token vs {baseline}", summary, name,
                       f"baseline: {baseline}; above 0 = slower than the baseline", (zero,))


def prefill_tps(summary: pd.DataFrame, **_: Any) -> alt.TopLevelMixin:
    return single_stream_chart(summary, "prefill_tps", "prefill tok/s (higher is better)",
                                "no single-stream cell processed its prompt")


def overlap(summary: pd.DataFrame, **_: Any) -> alt.TopLevelMixin:
    name = "overlap"
    many = with_where(summary[summary["conc"] > 1])
    if many.empty:
        return note_chart(CHARTS[name][0], "no cell ran more than one stream")
    many = many.reindex(columns=list(dict.fromkeys(
        [*many.columns, "overlap_unc", "prefill_share", "releases"])))
    many = many.assign(label=[_overlap_label(v, u, p, s) for v, u, p, s in zip(
        many["overlap"], many["overlap_unc"], many["prefill_share"], many["status"],
        strict=True)])
    order = ctx_order(summary)
    encode = {"x": ctx_axis(order),
              "y": alt.Y("conc:O", title="concurrent streams")}
    # Grey under everything: a failed cell (no overlap) still shows where it is.
    cells = alt.Chart().mark_rect(color="#ddd").encode(**encode)
    colour = alt.Chart().mark_rect().encode(
        **encode,
        color=alt.Color("overlap:Q", title="overlap",
                        scale=alt.Scale(domain=[-1, 0, 1], range=["#b2182b", "#f7f7f7",
                                                                  "#2166ac"], clamp=True)),
        tooltip=["pair:N", "link:N", "model:N", "ctx:N", "conc:O", "status:N",
                 alt.Tooltip("overlap:Q", format=".2f"),
                 alt.Tooltip("overlap_unc:Q", title="± (95% interval)", format=".2f"),
                 alt.Tooltip("releases:Q", title="releases")],
    ).transform_filter("isValid(datum.overlap)")
    text = alt.Chart().mark_text(fontSize=11).encode(**encode, text="label:N")
    return alt.layer(cells, colour, text, data=many).properties(
        width=80 * len(order) + 40, height=30 * many["conc"].nunique() + 20
    ).facet(
        row=alt.Row("model:N", title="model"),
        column=alt.Column("where:N", title=where_title(many)),
        title=chart_title(name, "2-way, 4-way, ... against the same link's single stream; ± is "
                           "the 95% interval over the cell's releases; ⚠: impossible "
                           "(above 1, or below 0 where prefill is a small share, beyond ±)"),
    )


def _overlap_label(value: Any, unc: Any, prefill_share: Any, status: Any) -> str:
    """A heatmap cell's text: "0.81 ±0.05" (⚠ where impossible), or its status."""
    if status != "ok" or pd.isna(value):
        return str(status)
    text = f"{value:.2f}" + (f" ±{unc:.2f}" if pd.notna(unc) else "")
    return text + (" ⚠" if releases.overlap_flag(value, unc, prefill_share) else "")


def _links_long(links: pd.DataFrame, columns: dict[str, str], scale: dict[str, float]
                ) -> pd.DataFrame:
    present = [c for c in columns if c in links.columns]
    long = with_where(links).melt(id_vars=["where"], value_vars=present, var_name="measure")
    long["value"] = pd.to_numeric(long["value"], errors="coerce") * long["measure"].map(
        lambda m: scale.get(m, 1.0))
    long["measure"] = long["measure"].map(columns)
    return long[long["value"].notna()]


def _grouped_bars(long: pd.DataFrame, axis: str, order: list[str],
                  axis_title: str = "link") -> alt.Chart:
    return alt.Chart(long).mark_bar().encode(
        x=alt.X("where:N", title=axis_title, axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("measure:N", sort=order),
        y=alt.Y("value:Q", title=axis),
        color=alt.Color("measure:N", sort=order, title=None),
        tooltip=["where:N", "measure:N", alt.Tooltip("value:Q", format=".3f")],
    ).properties(width=60 * long["where"].nunique() + 60, height=HEIGHT).resolve_scale(
        color="independent")


def links_chart(links: pd.DataFrame, **_: Any) -> alt.TopLevelMixin:
    name = "links"
    if links.empty:
        return note_chart(CHARTS[name][0], "no link results")
    bandwidth = {"a_to_b_gbps": "A→B", "b_to_a_gbps": "B→A", "bidir_gbps": "both at once"}
    latency = {"ping_ms": "idle ping", "rr_fixed_us": "RR fixed part",
               "rr16k_p50_us": "16 KB RR p50"}
    where = where_title(links)
    rates = _links_long(links, bandwidth, {})
    latencies = _links_long(links, latency, {"ping_ms": 1000.0})
    # A half with nothing measured (every link failed verification) has no size to draw.
    halves = [_grouped_bars(long, axis, list(measures.values()), where)
              for long, axis, measures in ((rates, "Gbit/s (iperf3, median)", bandwidth),
                                           (latencies, "µs", latency)) if not long.empty]
    if not halves:
        return note_chart(CHARTS[name][0], "no link was measured (the links table says "
                                           "why each failed)")
    return alt.hconcat(*halves, title=chart_title(
        name, "ICMP ping does not see a userspace delay relay; the RR probe does")
    ).resolve_scale(color="independent")


def token_gaps(summary: pd.DataFrame, percentiles: pd.DataFrame | None = None,
               **_: Any) -> alt.TopLevelMixin:
    """Per link at concurrency 1: the inter-token gaps' median to p99, p90 and max, per
    context, one panel per model (summary/percentiles.py's rows)."""
    name = "token_gaps"
    rows = (percentiles[(percentiles["metric"] == "inter_token_latency_ms")
                        & (percentiles["conc"] == 1)] if percentiles is not None
            else pd.DataFrame())
    if rows.empty:
        return note_chart(CHARTS[name][0], "no single-stream cell has gaps between tokens")
    data = with_where(rows)
    order = [c for c in ctx_order(summary) if c in set(data["ctx"])]
    base = alt.Chart(data).encode(
        x=alt.X("where:N", title=where_title(data), axis=alt.Axis(labelAngle=0)),
        color=alt.Color("link:N", scale=link_colours(data), legend=None))
    scale = alt.Scale(type="log")
    bar = base.mark_bar(size=14, opacity=0.7).encode(
        y=alt.Y("p50:Q", title="gap between tokens (ms, log)", scale=scale), y2="p99:Q",
        tooltip=["where:N", "ctx:N", alt.Tooltip("p50:Q", format=".3f"),
                 alt.Tooltip("p90:Q", format=".3f"), alt.Tooltip("p99:Q", format=".3f"),
                 alt.Tooltip("max:Q", format=".3f"), "count:Q"])
    tick = base.mark_tick(color="#222", thickness=2, size=18).encode(y=alt.Y("p90:Q",
                                                                             scale=scale))
    dot = base.mark_point(filled=True, size=30).encode(y=alt.Y("max:Q", scale=scale))
    return alt.layer(bar, tick, dot).properties(
        width=60 * data["where"].nunique() + 40, height=HEIGHT).facet(
        row=alt.Row("model:N", title="model"),
        column=alt.Column("ctx:N", sort=order, title="context")).properties(
        title=chart_title(name, "single streams; bar: p50 to p99, tick: p90, dot: max"))


def timeline_cell(summary: pd.DataFrame, baseline: str, choice: str = "") -> pd.Series | None:
    """The cell whose token timeline is drawn.

    `choice` names one as pair/link/model/ctx/conc. Otherwise: an ok cell of the
    baseline link (any link if it has none), preferring more than one stream, then
    the shortest context, then the most streams, so that overlap is visible."""
    if choice:
        pair, link, model, ctx, conc = choice.split("/")
        hit = summary[(summary["pair"] == pair) & (summary["link"] == link)
                      & (summary["model"] == model) & (summary["ctx"] == ctx)
                      & (summary["conc"] == int(conc))]
        if hit.empty:
            raise ValueError(f"timeline cell {choice!r} is not in the summary")
        return hit.iloc[0]
    ok = summary[summary["status"] == "ok"]
    pool = ok[ok["link"] == baseline]
    pool = pool if not pool.empty else ok
    if pool.empty:
        return None
    ranked = pool.assign(single=pool["conc"] == 1, neg_conc=-pool["conc"]).sort_values(
        ["single", "ctx_tokens", "neg_conc", "pair", "model"])
    return ranked.iloc[0]


def read_timeline(cells_dir: str | Path, cell: pd.Series) -> pd.DataFrame:
    """One cell's tokens (request_id, token_index, t_ns, t_send_ns) from its Parquet: of
    one release of its N requests (`one_release`), where it released them several
    times."""
    path = results.cell(cell["pair"], cell["link"], cell["model"], cell["ctx"], cell["conc"],
                        root=Path(cells_dir).parent)
    names = pq.ParquetFile(path).schema_arrow.names
    columns = ["request_id", "token_index", "t_ns", "t_send_ns",
               *[c for c in ("repeat", "shot", "reference") if c in names]]
    return one_release(pq.read_table(path, columns=columns).to_pandas())


def one_release(tokens: pd.DataFrame) -> pd.DataFrame:
    """The tokens of the cell's own release whose wall time (first send to last token)
    is nearest the median release's, so that the timeline shows N streams as the
    cell's median overlap saw them, not every release one above the other. Tokens
    without a release (files written before cells released more than once) are kept
    whole."""
    if "shot" not in tokens or tokens.empty:
        return tokens
    if "reference" in tokens:
        tokens = tokens[~tokens["reference"].fillna(False).astype(bool)]
    keys = [k for k in ("repeat", "shot") if k in tokens]
    by = tokens.groupby(keys)
    walls = by["t_ns"].max() - by["t_send_ns"].min()
    if len(walls) < 2:
        return tokens
    pick = (walls - walls.median()).abs().idxmin()
    pick = pick if isinstance(pick, tuple) else (pick,)
    mask = np.logical_and.reduce([tokens[k] == v for k, v in zip(keys, pick, strict=True)])
    return tokens[mask].assign(releases=len(walls))


def _thin(tokens: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Every k-th token of each stream (first and last always kept) when there are many."""
    step = max(1, -(-len(tokens) // TIMELINE_MAX_TOKENS))
    if step == 1:
        return tokens, 1
    last = tokens.groupby("request_id")["token_index"].transform("max")
    keep = (tokens["token_index"] % step == 0) | (tokens["token_index"] == last)
    return tokens[keep], step


def token_timeline(tokens: pd.DataFrame | None, cell: pd.Series | None = None, **_: Any
                   ) -> alt.TopLevelMixin:
    name = "token_timeline"
    if tokens is None or tokens.empty or cell is None:
        return note_chart(CHARTS[name][0], "no cell with tokens to draw")
    t0 = int(tokens["t_send_ns"].min())
    tokens = tokens.assign(t_ms=(tokens["t_ns"] - t0) / 1e6,
                           stream=tokens["request_id"].astype(int))
    waits = tokens.groupby("stream").agg(send_ms=("t_send_ns", "first"),
                                         first_ms=("t_ms", "min")).reset_index()
    waits["send_ms"] = (waits["send_ms"] - t0) / 1e6
    shown, step = _thin(tokens)
    overlap_text = f", overlap {cell['overlap']:.2f}" if pd.notna(cell.get("overlap")) else ""
    releases = int(tokens["releases"].iloc[0]) if "releases" in tokens else 1
    if releases > 1:
        overlap_text += (f" (median of {releases} releases; drawn: the release whose "
                         "wall time is the median's)")
    subtitle = (f"{cell['pair']}/{cell['link']}/{cell['model']}, context {cell['ctx']}, "
                f"{cell['conc']} streams{overlap_text}; grey bar = waiting for the first "
                "token (prefill), ticks = tokens"
                + (f"; every {step}th token shown" if step > 1 else ""))
    y = alt.Y("stream:O", title="stream (request)")
    wait = alt.Chart(waits).mark_rule(color="#bbb", strokeWidth=6).encode(
        x=alt.X("send_ms:Q", title="ms since the first request was sent"), x2="first_ms:Q",
        y=y, tooltip=["stream:O", alt.Tooltip("send_ms:Q", format=".1f"),
                      alt.Tooltip("first_ms:Q", title="first token ms", format=".1f")])
    ticks = alt.Chart(shown).mark_tick(thickness=1, size=18).encode(
        x="t_ms:Q", y=y, color=alt.Color("stream:N", legend=None),
        tooltip=["stream:O", "token_index:Q", alt.Tooltip("t_ms:Q", format=".2f")])
    return alt.layer(wait, ticks).properties(
        width=720, height=40 * tokens["stream"].nunique() + 20, title=chart_title(name, subtitle))


def _fit_lines(points: pd.DataFrame, fitted: pd.DataFrame | None, baseline: str
               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (model, ctx), a line with the mechanisms table's decode slope through the
    baseline link's point, and one label per model. The slope is the table's own (one
    estimator, `compare.mechanisms`), so the chart cannot print a different one."""
    lines, labels = [], []
    for (pair, model), group in points.groupby(["pair", "model"]):
        row = _decode_fit(fitted, pair, model)
        if row is None or not np.isfinite(row["slope"]):
            why = ("fit needs two links of different latency" if group["link"].nunique() < 2
                   else "no slope: see the mechanisms table's verdict")
            labels.append({"pair": pair, "model": model, "label": why})
            continue
        unc = f" ±{row['±']:.2f}" if pd.notna(row["±"]) else " (no ±: one point)"
        r2 = f"R² {row['R²']:.2f}, " if pd.notna(row["R²"]) else ""
        labels.append({"pair": pair, "model": model,
                       "label": f"slope {row['slope']:.2f}{unc} round trips/token "
                                f"(the mechanisms table; {r2}"
                                f"{int(row['points'])} link-context points)"})
        for ctx, rows in group.groupby("ctx"):
            base = rows[rows["link"] == baseline]
            if base.empty:
                continue
            intercept = base["decode_ms_per_token"].iloc[0] - row["slope"] * base[
                "latency_ms"].iloc[0]
            for x in (rows["latency_ms"].min(), rows["latency_ms"].max()):
                lines.append({"pair": pair, "model": model, "ctx": ctx, "latency_ms": x,
                              "fit_ms": intercept + row["slope"] * x})
    return pd.DataFrame(lines), pd.DataFrame(labels)


def _decode_fit(fitted: pd.DataFrame | None, pair: str, model: str) -> pd.Series | None:
    """The mechanisms table's decode row for (pair, model); it has no pair column when
    the run has one pair."""
    if fitted is None or fitted.empty:
        return None
    mine = fitted[(fitted["mechanism"] == "decode") & (fitted["model"] == model)]
    if "pair" in mine:
        mine = mine[mine["pair"] == pair]
    return mine.iloc[0] if len(mine) else None


def latency_column(links: pd.DataFrame) -> str | None:
    """The mechanisms table's latency figure (cell_summary.latency_column); None when no link
    has it."""
    column = cell_summary.latency_column(links)
    return column if column in links.columns and links[column].notna().any() else None


def latency_points(summary: pd.DataFrame, links: pd.DataFrame) -> pd.DataFrame:
    """Single-stream decode ms/token of each ok cell, less the time its token's bytes
    take on its link (traffic.own_transfer_ms; kept whole where unknown), next to its
    link's latency (ms, `latency_from` names the figure): what latency has to explain,
    as the mechanisms table fits it, each pair with its own latency figure
    (cell_summary.latency_by_pair)."""
    one = single_stream_rows(summary, "decode_ms_per_token")
    transfer = traffic.own_transfer_ms(one, links) if len(one) else pd.Series(dtype=float)
    one = one.assign(decode_ms_per_token=one["decode_ms_per_token"] - transfer.fillna(0))
    latency = cell_summary.latency_by_pair(links)
    latency = latency.assign(latency_ms=latency["latency_us"] / 1000).drop(
        columns="latency_us")
    points = one[["pair", "link", "where", "model", "ctx", "decode_ms_per_token"]].merge(
        latency, on=["pair", "link"])
    return points[np.isfinite(points["latency_ms"].astype(float))]


def _latency_layers(x: alt.X, colour: alt.Color) -> list[alt.Chart]:
    """Measured points, fitted lines and the fit's label, each from its `part` of the data."""
    dots = alt.Chart().mark_point(filled=True, size=60).encode(
        x=x, y=alt.Y("decode_ms_per_token:Q", title="decode ms/token less transfer"),
        color=colour,
        shape=alt.Shape("link:N", title="link"),
        tooltip=["pair:N", "link:N", "ctx:N", alt.Tooltip("latency_ms:Q", format=".3f"),
                 alt.Tooltip("latency_from:N", title="latency figure"),
                 alt.Tooltip("decode_ms_per_token:Q", format=".3f")],
    ).transform_filter("datum.part == 'point'")
    fit = alt.Chart().mark_line(strokeDash=[5, 3]).encode(
        x=x, y="fit_ms:Q", color=colour, detail=["pair:N", "ctx:N"],
    ).transform_filter("datum.part == 'fit'")
    label = alt.Chart().mark_text(align="left", baseline="top", dx=4, dy=4,
                                  color="#333").encode(
        x=alt.value(0), y=alt.value(0), text="label:N",
    ).transform_filter("datum.part == 'label'")
    return [dots, fit, label]


def decode_vs_latency(summary: pd.DataFrame, links: pd.DataFrame, baseline: str,
                      mechanisms: pd.DataFrame | None = None, **_: Any) -> alt.TopLevelMixin:
    name = "decode_vs_latency"
    points = latency_points(summary, links) if latency_column(links) else pd.DataFrame()
    if points.empty:
        return note_chart(CHARTS[name][0], "no single-stream decode with a link latency")
    lines, labels = _fit_lines(points, mechanisms, baseline)
    # A facet needs one data set: points, fitted lines and labels travel together,
    # told apart by `part`.
    data = pd.concat([points.assign(part="point"), lines.assign(part="fit"),
                      labels.assign(part="label")], ignore_index=True)
    used = sorted(points["latency_from"].dropna().unique())
    what = LATENCY_COLUMNS[used[0]] if len(used) == 1 else (
        "each pair's own (" + ", ".join(LATENCY_COLUMNS.get(u, u) for u in used) + ")")
    x = alt.X("latency_ms:Q", title=f"link latency: {what} (ms)")
    colour = alt.Color("ctx:N", sort=ctx_order(summary), title="context")
    # With several pairs, a row of panels per pair: each pair's fit is its own.
    return alt.layer(*_latency_layers(x, colour), data=data).properties(
        width=WIDTH + 120, height=HEIGHT + 40
    ).facet(
        **by_pair_and_model(points, columns=2),
        title=chart_title(name, "dashed: the mechanisms table's slope (round trips per token), "
                           "through the baseline link's point of each context"))


# The pairs chart's measures: (column, its uncertainty column or None, axis title).
BUILDERS: dict[str, Callable[..., alt.TopLevelMixin]] = {
    "decode_ms_per_token": decode_ms_per_token,
    "decode_delta": decode_delta,
    "prefill_tps": prefill_tps,
    "token_gaps": token_gaps,
    "overlap": overlap,
    "links": links_chart,
    "token_timeline": token_timeline,
    "decode_vs_latency": decode_vs_latency,
    "decode_sensitivity": lambda summary, **inputs: sensitivity.build(
        summary, contexts=ctx_order(summary), width=WIDTH, height=HEIGHT, **inputs),
    "backends": backends_chart,
    "pairs": pairs_chart,
}


def build(summary: pd.DataFrame, links: pd.DataFrame, baseline: str,
          tokens: pd.DataFrame | None = None, cell: pd.Series | None = None,
          mechanisms: pd.DataFrame | None = None, whatif_rows: pd.DataFrame | None = None,
          whatif_points: pd.DataFrame | None = None,
          percentiles: pd.DataFrame | None = None,
          levels: pd.DataFrame | None = None,
          comparison: pd.DataFrame | None = None) -> dict[str, alt.TopLevelMixin]:
    """Every chart, by name, in the report's order. `comparison`: the run's link
    comparison (compare.comparison.run_comparison), whose decode differences the decode Δ
    chart draws; `mechanisms`: the mechanisms table,
    whose decode slopes the decode-vs-latency chart draws; `whatif_*`: the what-if
    model and the measured links beside it (compare.whatif); `percentiles`: every
    cell's distributions (summary.percentiles); `levels`: the service levels'
    per-cell table (summary.service_levels), whose target the what-if chart draws."""
    inputs = {"summary": summary, "links": links, "baseline": baseline, "tokens": tokens,
              "cell": cell, "mechanisms": mechanisms, "whatif_rows": whatif_rows,
              "whatif_points": whatif_points, "percentiles": percentiles,
              "levels": levels, "comparison": comparison}
    return {name: BUILDERS[name](**inputs) for name in CHARTS}


def save(chart: alt.TopLevelMixin, out_dir: str | Path, name: str) -> list[Path]:
    """name.html (opens offline: the Vega libraries are inlined), name.png (2x) and
    name.vl.json (the Vega-Lite spec, data included, that the report page embeds)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    html, png, spec = out / f"{name}.html", out / f"{name}.png", out / f"{name}.vl.json"
    vegalite = chart.to_dict()  # validated once, for all three
    # Strict JSON (no NaN), so that a browser's JSON.parse reads it.
    strict = finite(vegalite)
    html.write_text(vega.offline_html(strict, name.replace("_", " ")), encoding="utf-8")
    png.write_bytes(vega.png(vegalite, scale=2))
    spec.write_text(json.dumps(strict, allow_nan=False))
    return [html, png, spec]


def render(summary_path: str, link_files: list[str], baseline: str, out_dir: str,
           cells_dir: str = results.CELLS, timeline: str = "",
           mechanisms_path: str = "", whatif_path: str = "",
           whatif_points_path: str = "", percentiles_path: str = "",
           levels_path: str = "", comparison_path: str = "") -> list[Path]:
    """Build and save every chart; returns the files written."""
    summary = pq.read_table(summary_path).to_pandas()
    percentiles = pd.read_parquet(percentiles_path) if percentiles_path else None
    levels = pd.read_parquet(levels_path) if levels_path else None
    mechanisms = pd.read_csv(mechanisms_path) if mechanisms_path else None
    comp = pd.read_parquet(comparison_path) if comparison_path else None
    whatif_rows = pd.read_parquet(whatif_path) if whatif_path else None
    whatif_points = pd.read_parquet(whatif_points_path) if whatif_points_path else None
    links = cell_summary.read_links(link_files)
    cell = timeline_cell(summary, baseline, timeline)
    tokens = read_timeline(cells_dir, cell) if cell is not None else None
    written = []
    for name, chart in build(summary, links, baseline, tokens, cell, mechanisms, whatif_rows,
                             whatif_points, percentiles, levels, comp).items():
        written += save(chart, out_dir, name)
    return written
