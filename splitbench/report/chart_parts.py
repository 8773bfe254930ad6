"""What every chart shares: the context order, the facets by pair and model, titles,
notes, the link colours and the context axis, and JSON without NaN."""

from __future__ import annotations

import math
from typing import Any, TypedDict

import altair as alt
import pandas as pd

from splitbench.report.contents import CHARTS

FACET_COLUMNS = 3
WIDTH, HEIGHT = 260, 200


def ctx_order(summary: pd.DataFrame) -> list[str]:
    """Context labels from shortest to longest prompt."""
    if summary.empty:
        return []
    pairs = summary[["ctx", "ctx_tokens"]].drop_duplicates().sort_values("ctx_tokens")
    return list(dict.fromkeys(pairs["ctx"]))


def note_chart(title: str, text: str) -> alt.Chart:
    """A chart that says why there is nothing to draw."""
    frame = pd.DataFrame({"text": [text]})
    return alt.Chart(frame, title=title).mark_text(size=14, color="#555").encode(
        text="text:N"
    ).properties(width=520, height=60)


def several_pairs(frame: pd.DataFrame) -> bool:
    return "pair" in frame and frame["pair"].nunique() > 1


def with_where(frame: pd.DataFrame) -> pd.DataFrame:
    """Add `where`: the link's name, prefixed by its pair when the run has several."""
    where = frame["pair"] + "/" + frame["link"] if several_pairs(frame) else frame["link"]
    return frame.assign(where=where)


def where_title(frame: pd.DataFrame) -> str:
    return "pair/link" if several_pairs(frame) else "link"


class Facets(TypedDict, total=False):
    """A chart's `facet` arguments: pairs in rows and models in columns, or models only."""

    row: alt.Row
    column: alt.Column
    facet: alt.Facet
    columns: int


def by_pair_and_model(summary: pd.DataFrame, columns: int = FACET_COLUMNS) -> Facets:
    """Facets: one panel per model; with several pairs, one row of panels per pair, so
    that no two pairs' lines share a panel (a link is drawn against its own pair's)."""
    if several_pairs(summary):
        return {"row": alt.Row("pair:N", title="pair"),
                "column": alt.Column("model:N", title="model")}
    return {"facet": alt.Facet("model:N", title="model"), "columns": columns}


def single_stream_rows(summary: pd.DataFrame, figure: str) -> pd.DataFrame:
    """Concurrency-1 cells with a usable figure; failed cells carry no figure."""
    one = summary[(summary["conc"] == 1) & (summary["status"] == "ok")]
    return with_where(one[one[figure].notna()])


def failed_note(summary: pd.DataFrame) -> str:
    """Which single-stream cells failed, for a subtitle (a chart cannot draw them)."""
    failed = summary[(summary["conc"] == 1) & (summary["status"] != "ok")]
    if failed.empty:
        return ""
    several = several_pairs(summary)
    names = [f"{f'{r.pair}/' if several else ''}{r.link}/{r.model}/{r.ctx}x{r.conc}: "
             f"{r.status}" for r in failed.itertuples()]
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return f"not drawn (failed): {shown}"


def chart_title(name: str, subtitle: str = "") -> alt.TitleParams:
    return alt.TitleParams(CHARTS[name][0], subtitle=subtitle or alt.Undefined, anchor="start")


def link_colours(summary: pd.DataFrame) -> alt.Scale:
    """One colour per link name, the same in every chart and every pair's panels (also
    where the baseline is absent)."""
    return alt.Scale(domain=sorted(summary["link"].dropna().unique()))


def ctx_axis(order: list[str]) -> alt.X:
    return alt.X("ctx:O", sort=order, title="context", axis=alt.Axis(labelAngle=0))


def by_context(frame: pd.DataFrame, figure: str, axis: str, summary: pd.DataFrame,
                name: str, subtitle: str, layers: tuple = ()) -> alt.FacetChart:
    """Lines per link over contexts, one panel per model (and per pair, when the run
    has several: each pair's links in its own row of panels)."""
    base = alt.Chart().encode(
        x=ctx_axis(ctx_order(summary)),
        y=alt.Y(f"{figure}:Q", title=axis),
        color=alt.Color("link:N", title="link", scale=link_colours(summary)),
        tooltip=["pair:N", "link:N", "model:N", "ctx:N", "ctx_tokens:Q",
                 alt.Tooltip(f"{figure}:Q", format=".3f")],
    ).mark_line(point=True)
    return alt.layer(base, *layers, data=frame).properties(
        width=WIDTH, height=HEIGHT
    ).facet(
        **by_pair_and_model(summary), title=chart_title(name, subtitle),
    )


def single_stream_chart(summary: pd.DataFrame, column: str, axis: str,
                         empty_why: str) -> alt.TopLevelMixin:
    """One single-stream figure by context, a line per link (the chart shares its name)."""
    data = single_stream_rows(summary, column)
    if data.empty:
        return note_chart(CHARTS[column][0], empty_why)
    return by_context(data, column, axis, summary, column, failed_note(summary))


def finite(value: Any) -> Any:
    """NaN and infinities as null: JSON has no word for them."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
