"""Per-file results kept between runs of a stage: a computation over many files (every
cell's requests) redone only for the cells whose files changed since it last ran.

A unit is the files of one key (`key_of`: a cell's keys; a cell measured in repeats has
a file per repeat). Its stamp is its files' sizes and modification times (ns), with
those of the files its rows also read (`depends`: the baseline cell a link's gaps are
held to, the single stream a concurrent cell's prefill share comes from). A kept row is
reused while its unit's stamp, the computation's `settings` and its code (`code`: the
modules it runs and all they import; the whole package where none are named) are what
they were when it was made; anything else, or a store that cannot be read, is
computed afresh: the store only ever saves time. Units still to compute go in batches
of BATCH, so that the first build of a large matrix holds one batch's data at a time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

BATCH = 2000
UNIT = "_memo_unit"
DONE = "done.json"  # what the store's tables hold: their units' stamps


PACKAGE = Path(__file__).resolve().parents[1]  # splitbench/


@functools.cache
def code_fingerprint(modules: tuple[str, ...] = ()) -> str:
    """A hash of the source a computation runs: `modules` (dotted names) and every
    module of the package they import, at any depth and anywhere in a file (an import
    inside a function too), with the packages' __init__ files on the way; the whole
    package where no module is named. A kept row was made by this code: a change
    anywhere else (the report's pages, the cells stage) keeps it."""
    paths = (sorted(source_closure(modules)) if modules
             else sorted(PACKAGE.rglob("*.py")))
    digest = hashlib.sha256()
    for path in paths:
        digest.update(str(path.relative_to(PACKAGE)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def source_closure(modules: Sequence[str]) -> set[Path]:
    """The package's source files that `modules` import, themselves included."""
    seen: set[Path] = set()
    todo = [name for name in modules]
    while todo:
        for path in _files_of(todo.pop()):
            if path in seen:
                continue
            seen.add(path)
            todo.extend(_imported(path))
    return seen


def _files_of(name: str) -> list[Path]:
    """A dotted name's source file (a module, or a package's __init__), with the
    __init__ of every package above it; none outside the package or for a name that is
    an attribute of a module (`from splitbench.x import function`)."""
    parts = name.split(".")
    if parts[0] != PACKAGE.name:
        return []
    files = []
    for depth in range(1, len(parts) + 1):
        base = PACKAGE.parent.joinpath(*parts[:depth])
        if (base / "__init__.py").exists():
            files.append(base / "__init__.py")
        elif base.with_suffix(".py").exists():
            files.append(base.with_suffix(".py"))
    return files


# An import statement at the start of a line, at any indent (inside a function too):
# `import a.b, c` or `from .a import (b, c)` (parenthesised over several lines). Read by
# pattern, not by parsing each file: a line in a string that reads as an import only
# adds a file to the closure (a rebuild more, never a stale row).
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w., \t]+)", re.M)
_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)",
                   re.M)


def _imported(path: Path) -> list[str]:
    """Every module name the file imports: `import a.b`, `from a import b` (as a.b and
    a), relative imports resolved against the file's package."""
    package = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    text = path.read_text()
    names = [name.split()[0] for found in _IMPORT.finditer(text)
             for name in found.group(1).split(",") if name.strip()]
    for found in _FROM.finditer(text):
        base = found.group(1)
        dots = len(base) - len(base.lstrip("."))
        if dots:
            up = package[: len(package) - dots + 1]
            base = ".".join([*up, *([base.lstrip(".")] if base.lstrip(".") else [])])
        listed = re.sub(r"#[^\n]*", "", found.group(2)).strip("() \t\n")
        names.append(base)
        names.extend(f"{base}.{name.split()[0]}" for name in listed.split(",")
                     if name.strip())
    return names


def stamp(path: str | Path) -> str:
    found = os.stat(path)
    return f"{found.st_size}:{found.st_mtime_ns}"


def tables(store: str | Path, files: Sequence[str],
           compute: Callable[[list[str]], dict[str, pd.DataFrame]],
           key_of: Callable[[str], tuple], keys: Sequence[str], settings: object = None,
           depends: Callable[[str], list[str]] | None = None,
           names: Sequence[str] = (), batch_order: Callable[[tuple], object] | None = None,
           code: Sequence[str] = ()) -> dict[str, pd.DataFrame]:
    """compute(files): several tables by name (`names`), from the rows kept in the
    directory `store` for the units that did not change and compute(batch) for the
    rest; `store` then holds them all. A unit is the files of one key (a cell measured
    in several files, its repeats); a row belongs to the unit its `keys` name, and a row
    of no unit being computed (a file compute read beside them, a baseline) is left out.
    Units are computed in the order `batch_order` gives their keys (so that a batch
    holds the cells that read each other's files); rows come in the order of the units'
    first files (each unit's rows in the order compute gave them). `code`: the modules
    compute runs (code_fingerprint)."""
    units: dict[str, list[str]] = {}
    unit_keys: dict[str, tuple] = {}
    for path in files:
        key = key_of(path)
        units.setdefault(_name(key), []).append(path)
        unit_keys.setdefault(_name(key), key)
    stamps = {unit: "|".join(stamp(f) for f in unit_files)
              + "".join(f"|{stamp(d)}" for f in unit_files
                        for d in (depends(f) if depends else []) if os.path.exists(d))
              for unit, unit_files in units.items()}
    made = hashlib.sha256(json.dumps([code_fingerprint(tuple(code)), settings, list(names)],
                                     sort_keys=True, default=str).encode()).hexdigest()[:16]
    kept, done = _read(Path(store), names, made)
    todo = [unit for unit in units if done.get(unit) != stamps[unit]]
    if batch_order is not None:
        todo.sort(key=lambda unit: batch_order(unit_keys[unit]))
    parts = {name: [kept[name][kept[name][UNIT].isin(set(units) - set(todo))]]
             for name in kept}
    for start in range(0, len(todo), BATCH):
        batch = todo[start:start + BATCH]
        made_now = compute([f for unit in batch for f in units[unit]])
        for name, part in made_now.items():
            part[UNIT] = [_name(k) for k in part[list(keys)].itertuples(index=False)]
            parts.setdefault(name, []).append(part[part[UNIT].isin(set(batch))])
    order = {unit: i for i, unit in enumerate(units)}
    out = {}
    nothing = compute([]) if not files else {}  # the tables' columns, with no rows
    for name in names:
        pieces = [p for p in parts.get(name, []) if len(p)]
        frame = (pd.concat(pieces, ignore_index=True) if pieces
                 else nothing.get(name, pd.DataFrame()) if not files
                 else _empty(parts.get(name, [])))
        if UNIT not in frame:
            frame[UNIT] = pd.Series(dtype=object)
        out[name] = frame.iloc[frame[UNIT].map(order).argsort(kind="stable")]
    _write(Path(store), out, made, stamps)
    return {name: frame.drop(columns=[UNIT]).reset_index(drop=True)
            for name, frame in out.items()}


def _empty(pieces: list[pd.DataFrame]) -> pd.DataFrame:
    """No rows, with the columns a computation gave (where it gave any)."""
    return pieces[0].iloc[:0] if pieces else pd.DataFrame()


def _name(key: tuple) -> str:
    """A unit's key as one string (a store's JSON names it so)."""
    return "\x1f".join(str(part) for part in key)


def _read(store: Path, names: Sequence[str], made: str
          ) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """The kept tables and each unit's stamp when they were made; none where the store
    is missing, any of it unreadable, or made by other code or settings."""
    try:
        meta = json.loads((store / DONE).read_text())
        if meta.get("made") != made:
            return {}, {}
        kept = {name: pq.read_table(store / f"{name}.parquet").to_pandas() for name in names}
    except (OSError, KeyError, TypeError, ValueError, pa.ArrowException):
        return {}, {}
    if any(UNIT not in frame for frame in kept.values()):
        return {}, {}
    return kept, meta.get("done", {})


def _write(store: Path, frames: dict[str, pd.DataFrame], made: str,
           done: dict[str, str]) -> None:
    """The tables, then the record of what they hold: a store whose record is from
    another pass, or missing, is read as empty."""
    store.mkdir(parents=True, exist_ok=True)
    (store / DONE).unlink(missing_ok=True)
    for name, frame in frames.items():
        partial = store / f"{name}.partial"
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), partial)
        partial.replace(store / f"{name}.parquet")
    partial = store / f"{DONE}.partial"
    partial.write_text(json.dumps({"made": made, "done": done}))
    partial.replace(store / DONE)
