"""The small pieces of the report page's HTML: escaping, a data frame or Markdown as a
table in its own scrolling box (long cells wrapping), provenance cut for reading."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pandas as pd
from markdown_it import MarkdownIt

from splitbench.report import chart_parts

# Long provenance values (a probe's source code passed with -c) are cut to this.
MAX_TEXT = 400
# A table cell longer than this (characters) wraps within its column; shorter ones (a
# figure and its ±) stay on one line. In a wrapping cell too a figure keeps its ±.
LONG_CELL = 24


def esc(value: Any) -> str:
    return html.escape("—" if value is None or value == "" else str(value))


def script_json(value: Any) -> str:
    """Strict JSON safe inside a <script> element: no '<' can close it early."""
    return json.dumps(chart_parts.finite(value), allow_nan=False).replace("<", "\\u003c")


def short(value: Any) -> Any:
    """Provenance with long strings cut, for reading (the Parquet keeps them whole)."""
    if isinstance(value, dict):
        return {k: short(v) for k, v in value.items()}
    if isinstance(value, list):
        return [short(v) for v in value]
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return f"{value[:MAX_TEXT]}… ({len(value)} characters)"
    return value


def dl(items: dict[str, Any]) -> str:
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items.items())
    return f"<dl>{rows}</dl>"


_CELL = re.compile(r"<td([^>]*)>(.*?)</td>", re.S)


def wrap_long_cells(table_html: str) -> str:
    """Marks each cell longer than LONG_CELL characters (its text, tags aside) with class
    "long": it wraps, where every other cell stays on one line."""
    def mark(cell: re.Match) -> str:
        text = html.unescape(re.sub(r"<[^>]+>", "", cell[2]))
        if len(text) <= LONG_CELL:
            return cell[0]
        return f'<td class="long"{cell[1]}>{cell[2].replace(" ±", "&nbsp;±")}</td>'
    return _CELL.sub(mark, table_html)


def frame_html(frame: pd.DataFrame) -> str:
    shown = frame.astype(object).where(frame.notna(), "—")
    table = wrap_long_cells(shown.to_html(index=False, escape=True, border=0))
    # Column names as the Parquet spells them (emulated_rate_gbit_a_to_b) may break
    # after an underscore.
    table = re.sub(r"<th([^>]*)>(.*?)</th>",
                   lambda th: f"<th{th[1]}>{th[2].replace('_', '_<wbr>')}</th>", table)
    return f'<div class="table-wrap">{table}</div>'


def markdown(text: str) -> str:
    """Markdown (CommonMark and tables, raw HTML escaped) as HTML, each table in its own
    scrolling box and its long cells wrapping. Tables carry text from outside (a server's
    error, a host's reply), so the page makes no image and no link that leaves it: an
    image's syntax stays text, a link only goes to a place on the page or beside it."""
    parser = MarkdownIt("commonmark", {"html": False}).enable("table").disable("image")
    parser.validateLink = _link_stays_here
    body = parser.render(text)
    body = body.replace("<table>", '<div class="table-wrap"><table>').replace(
        "</table>", "</table></div>")
    return wrap_long_cells(body)


def _link_stays_here(url: str) -> bool:
    """A link to an anchor on the page or a path beside it: no scheme (http:, data:,
    javascript:), no host (//...)."""
    url = url.strip()
    return not url.startswith("//") and re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", url) is None
