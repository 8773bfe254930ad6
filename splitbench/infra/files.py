"""Files other processes read while they may be written: written whole or not at all."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_text(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file beside it and a rename: a reader
    (another job, a later launch, a teardown) sees the old file or the new one, never a
    torn one. The temporary name is this process's, so two writers do not share it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


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
