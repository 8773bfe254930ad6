"""Files other processes read while they may be written: written whole or not at all."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary file beside `path` to write, renamed onto `path` when the block ends
    without an error (removed when it fails): a reader (another job, a later launch, a
    teardown) sees the old file or the new one, never a torn one. For writers that want
    a file name (pyarrow, the GGUF writer, a compiler). The temporary name is this
    process's, so two writers do not share it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` whole or not at all (`replacing`)."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=1))


def read_json(path: Path) -> Any | None:
    """The JSON in `path`, or None when it is missing or unreadable (a file torn by a
    crash from before writes were atomic reads as missing, not as an error that stops
    every later run)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
