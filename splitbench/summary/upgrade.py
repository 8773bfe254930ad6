"""Request files written in an older results format, brought up to the current one as
they are read: the one place that knows what older files lack (results.FORMAT says
what each format added). A reader after this sees every file alike.

- format 0, rows without their identity (pair, link, model, ctx, conc, repeat): taken
  from the file's path (`results.missing_identity`);
- format 0, requests without their own dispersion (`decode_ms_se`, none or none filled
  in): computed from the cell's token file as metrics.request_row computes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from splitbench.contracts import results


def with_identity(table: pa.Table, path: str) -> pa.Table:
    """A request file's rows with their identity columns; files written before rows
    carried them get them from their path (the results layout's own parser)."""
    added = results.missing_identity(table.column_names, path, results.IDENTITY)
    for key, value in added.items():
        kind = pa.int64() if key in ("conc", "repeat") else pa.string()
        table = table.append_column(key, pa.array([value] * table.num_rows, type=kind))
    return table


def lacks_dispersion(table: pa.Table) -> bool:
    """Whether a request file's rows predate their own `decode_ms_se` (none, or none
    filled in)."""
    return "decode_ms_se" not in table.column_names or _all_missing(table["decode_ms_se"])


def fill_dispersion(frame: pd.DataFrame, file_of: np.ndarray, old_files: Sequence[str],
                    old: Sequence[int]) -> None:
    """`decode_ms_se` of the rows of the files at positions `old` (their paths:
    `old_files`; `file_of`: each row's file position), from their token files."""
    se = _token_se([results.tokens_of(path) for path in old_files])
    rows = np.isin(file_of, old)
    values = (frame["decode_ms_se"].to_numpy(dtype="float64", na_value=np.nan, copy=True)
              if "decode_ms_se" in frame else np.full(len(frame), np.nan))
    at = pd.MultiIndex.from_arrays(
        [np.searchsorted(old, file_of[rows]), frame["request_id"].to_numpy()[rows]])
    values[rows] = se.reindex(at).to_numpy() if len(se) else np.nan
    frame["decode_ms_se"] = values

def _all_missing(column: pa.ChunkedArray) -> bool:
    return len(column) == 0 or bool(pc.all(pc.is_null(column, nan_is_null=True)).as_py())


def _token_se(token_files: Sequence[Path]) -> pd.Series:
    """Standard error of each request's mean inter-token gap (ms), by (position in
    token_files, request_id); nothing for files that do not exist."""
    pieces = []
    for i, path in enumerate(token_files):
        if path.exists():
            table = pq.ParquetFile(path).read(columns=["request_id", "token_index", "t_ns"],
                                              use_threads=False)
            pieces.append(table.replace_schema_metadata(None).append_column(
                "file", pa.array(np.full(table.num_rows, i))))
    if not pieces:
        return pd.Series(dtype="float64")
    tokens = pa.concat_tables(pieces, promote_options="permissive").to_pandas()
    tokens = tokens.sort_values(["file", "request_id", "token_index"])
    by = [tokens["file"], tokens["request_id"]]
    gaps = tokens.groupby(by)["t_ns"].diff().div(1e6).groupby(by)
    count = gaps.count()
    return (gaps.std(ddof=1) / np.sqrt(count)).where(count >= 2)
