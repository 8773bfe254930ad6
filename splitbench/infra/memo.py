"""Per-file results kept between runs of a stage: a computation over many files (every
cell's requests) redone only for the cells whose files changed since it last ran.

A unit is the files of one key (`key_of`: a cell's keys; a cell measured in repeats has
a file per repeat). Its stamp is its files' sizes and modification times (ns), with
those of the files its rows also read (`depends`: the baseline cell a link's gaps are
held to, the single stream a concurrent cell's prefill share comes from). A kept row is
reused while its unit's stamp, the computation's `settings` and the package's code are
what they were when it was made; anything else, or a store that cannot be read, is
computed afresh: the store only ever saves time. Units still to compute go in batches
of BATCH, so that the first build of a large matrix holds one batch's data at a time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

BATCH = 2000
UNIT = "_memo_unit"


@functools.cache
def code_fingerprint() -> str:
    """A hash of the package's own source: a kept row was made by this code."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def stamp(path: str | Path) -> str:
    found = os.stat(path)
    return f"{found.st_size}:{found.st_mtime_ns}"


def rows(store: str | Path, files: Sequence[str],
         compute: Callable[[list[str]], pd.DataFrame], key_of: Callable[[str], tuple],
         keys: Sequence[str], settings: object = None,
         depends: Callable[[str], list[str]] | None = None) -> pd.DataFrame:
    """compute(files), from the rows kept in `store` (a Parquet file) for the units that
    did not change and compute(batch) for the rest; `store` then holds them all. A unit
    is the files of one key (a cell measured in several files, its repeats); a row
    belongs to the unit its `keys` name, and a row of no unit being computed (a file
    compute read beside them, a baseline) is left out. Rows come in the order of the
    units' first files (each unit's rows in the order compute gave them)."""
    units: dict[str, list[str]] = {}
    for path in files:
        units.setdefault(_name(key_of(path)), []).append(path)
    stamps = {unit: "|".join(stamp(f) for f in unit_files)
              + "".join(f"|{stamp(d)}" for f in unit_files
                        for d in (depends(f) if depends else []) if os.path.exists(d))
              for unit, unit_files in units.items()}
    made = hashlib.sha256(json.dumps([code_fingerprint(), settings], sort_keys=True,
                                     default=str).encode()).hexdigest()[:16]
    kept, done = _read(Path(store), made)
    todo = [unit for unit in units if done.get(unit) != stamps[unit]]
    parts = [kept[kept[UNIT].isin(set(units) - set(todo))]] if len(kept) else []
    for start in range(0, len(todo), BATCH):
        batch = todo[start:start + BATCH]
        part = compute([f for unit in batch for f in units[unit]])
        part[UNIT] = [_name(k) for k in part[list(keys)].itertuples(index=False)]
        parts.append(part[part[UNIT].isin(set(batch))])
    parts = [p for p in parts if len(p)]
    out = pd.concat(parts, ignore_index=True) if parts else compute([])
    if UNIT not in out:
        out[UNIT] = pd.Series(dtype=object)
    order = {unit: i for i, unit in enumerate(units)}
    out = out.iloc[out[UNIT].map(order).argsort(kind="stable")]
    _write(Path(store), out, made, stamps)
    return out.drop(columns=[UNIT]).reset_index(drop=True)


def _name(key: tuple) -> str:
    """A unit's key as one string (a store's JSON names it so)."""
    return "\x1f".join(str(part) for part in key)


def _read(store: Path, made: str) -> tuple[pd.DataFrame, dict[str, str]]:
    """The kept rows and each file's stamp when they were made; none where the store is
    missing, unreadable or made by other code or settings."""
    try:
        table = pq.read_table(store)
        meta = json.loads(table.schema.metadata[b"memo"])
    except (OSError, KeyError, TypeError, ValueError, pa.ArrowException):
        return pd.DataFrame(), {}
    if meta.get("made") != made:
        return pd.DataFrame(), {}
    return table.to_pandas(), meta.get("done", {})


def _write(store: Path, frame: pd.DataFrame, made: str, done: dict[str, str]) -> None:
    store.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"memo":
                                           json.dumps({"made": made, "done": done})})
    partial = store.with_suffix(".partial")
    pq.write_table(table, partial)
    partial.replace(store)  # a reader never sees half a store
