"""Nothing measured is lost: a re-measured cell's previous files go to the archive.

Snakemake deletes a job's old outputs before the job starts, so the cell keeps a hard
link to each file it writes under `results/.kept/` (no copy, no extra space). When the
cell is measured again, those links are moved to `results/archive/<timestamp>/...`
(the same relative path) before the new files are written.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from splitbench.contracts import results


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def supersede(paths: list[str], when: str | None = None) -> list[Path]:
    """Move the previous measurement of these outputs into the archive; returns where
    each went (nothing when they were never measured)."""
    when = when or stamp()
    moved = []
    for path in paths:
        kept = results.kept(path)
        if kept is not None and kept.exists():
            target = _free(path, when)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(kept, target)
            moved.append(target)
    return moved


def _free(path: str, when: str) -> Path:
    """The archive path for `path` at `when`, or at `when-002`, `when-003`, ... where an
    earlier measurement archived in the same second already holds it (numbered so they
    sort in order): an archive never replaces an archive."""
    target, n = results.archived(path, when), 1
    while target.exists():
        n += 1
        target = results.archived(path, f"{when}-{n:03d}")
    return target


def keep(paths: list[str]) -> None:
    """Hard-link freshly written outputs, so a later re-measurement can archive them."""
    for path in paths:
        kept = results.kept(path)
        if kept is None:
            continue
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.unlink(missing_ok=True)
        os.link(path, kept)


def keep_existing(root: str | Path) -> int:
    """Hard-link every measured file that has no kept link yet (files written before the
    archive existed), so that re-measuring them archives instead of losing them."""
    added = 0
    for folder in results.MEASURED:
        for path in Path(root, folder).rglob("*.parquet"):
            kept = results.kept(path)
            if kept is not None and not kept.exists():
                keep([str(path)])
                added += 1
    return added
