"""results/findings.json: what a run found, as data. The `findings` stage writes it
(findings/collect.py: each finding's section, headline, text, flags and refs, and its
Markdown); the run's checks print its headlines and `compare` sets two runs' side by
side, neither reading the Markdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# The file's layout: {"format": FORMAT, "findings": [Finding.record(), ...], "glance":
# [a record per pair, model, link and context: findings/glance.py's figures]}.
FORMAT = 1


def as_json(records: list[dict[str, Any]], glance: list[dict[str, Any]] = ()) -> str:
    """The findings' records (Finding.record) and the glance table's figures as the file
    holds them (NaN as null: the file is strict JSON)."""
    clean = [{k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
             for row in glance]
    return json.dumps({"format": FORMAT, "findings": records, "glance": clean},
                      ensure_ascii=False, indent=1, allow_nan=False)


def read(path: str | Path) -> list[dict[str, Any]] | None:
    """The findings' records; None where the run has no findings.json (none written yet,
    or a run made before findings were written as data)."""
    path = Path(path)
    if not path.exists():
        return None
    return json.loads(path.read_text())["findings"]


def headlines(records: list[dict[str, Any]]) -> list[str]:
    """What a run's last lines say: what did not work (✗ and its text), then each
    finding's headline with its section and its ⚠."""
    out = []
    for r in records:
        if r["failed"]:
            out.append(f"✗ {r['text']}")
        elif r["headline"]:
            out.append(f"{r['section']}: {'⚠ ' if r['flagged'] else ''}{r['headline']}")
    return out
