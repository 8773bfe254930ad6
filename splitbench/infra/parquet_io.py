"""Parquet files with provenance in their schema metadata, written atomically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from splitbench import version
from splitbench.contracts import results
from splitbench.infra import files

META_KEY = b"splitbench"


def write(frame: pd.DataFrame, path: str | Path, provenance: dict[str, Any]) -> None:
    """Write frame to path with provenance; readers never see a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[META_KEY] = json.dumps(
        {"splitbench_version": version.number(), "code_commit": version.commit(),
         "results_format": results.FORMAT, **provenance},
        default=str
    ).encode()
    table = table.replace_schema_metadata(meta)
    with files.replacing(path) as tmp:
        pq.write_table(table, tmp)


def provenance(path: str | Path) -> dict[str, Any]:
    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta.get(META_KEY, b"{}"))


def results_format(path: str | Path) -> int:
    """The results format a file was written in (results.FORMAT); 0 for a file from
    before formats were written."""
    return int(provenance(path).get("results_format", 0))


def numbers(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column as numbers: NaN where a value is not one, or where the frame lacks the
    column (a file from before it was recorded)."""
    if column not in frame:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[column], errors="coerce")
