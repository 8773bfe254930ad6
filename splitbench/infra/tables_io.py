"""Tables as files: a DataFrame as Markdown and CSV (stem.md, stem.csv). It knows no
analysis, so that every stage that writes a table (the aggregate, the drift check, the
round-trip sweep) writes it the same way without importing the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def to_markdown(frame: pd.DataFrame) -> str:
    columns = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join("—" if _missing(v) else _cell(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    """A value as one table cell: a pipe or a line break in it (an error text from a
    server or a host) would end the cell or the row, so they are escaped or joined."""
    return " ".join(str(value).splitlines()).replace("|", "\\|")


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def write_table(frame: pd.DataFrame, stem: str | Path, title: str, note: str = "") -> None:
    """stem.csv and stem.md (the title, the table, then the table's own note, a table
    function's `frame.attrs["note"]`, and `note` as Markdown, if any)."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(stem.with_suffix(".csv"), index=False)
    own = frame.attrs.get("note", "")
    stem.with_suffix(".md").write_text(f"## {title}\n\n{to_markdown(frame)}{own}{note}")
