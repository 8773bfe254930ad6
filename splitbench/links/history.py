"""Every verification of a link, kept, so a re-verification can say what changed.

Snakemake deletes a rule's output before re-running it, so the previous verification
is kept beside it in `{link}.history.jsonl` (one line per verification). Cells are not
re-run when a link is re-verified; each keeps the fingerprint it was measured under.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from splitbench.contracts import results
from splitbench.contracts.slices import LinkCheckSettings

if TYPE_CHECKING:  # verify imports this module
    from splitbench.links.figures import LinkRow

TRACKED = ("a_to_b_gbps", "b_to_a_gbps", "bidir_gbps", "rr16k_p50_us")


class KeptVerification(TypedDict, total=False):
    """A line of `{link}.history.jsonl`: a verification's identity and TRACKED figures."""

    fingerprint: str | None
    measured_at: str | None
    a_to_b_gbps: float | None
    b_to_a_gbps: float | None
    bidir_gbps: float | None
    rr16k_p50_us: float | None


def compare(previous: KeptVerification, row: LinkRow, threshold: float) -> list[str]:
    """Material differences between two verifications of one link."""
    changes = []
    if previous.get("fingerprint") != row.get("fingerprint"):
        changes.append(f"link identity changed since {previous.get('measured_at')} "
                       f"(fingerprint {previous.get('fingerprint')} -> {row['fingerprint']})")
    for key in TRACKED:
        old, new = previous.get(key), row.get(key)
        if old and new is not None and abs(new - old) / old > threshold:
            changes.append(f"{key} changed {(new - old) / old:+.0%} since "
                           f"{previous.get('measured_at')} ({old:.4g} -> {new:.4g})")
    return changes


def compare_and_keep(row: LinkRow, out: str | Path, settings: LinkCheckSettings) -> list[str]:
    """Compare with the last kept verification, then append this one."""
    path = results.link_history(out)
    changes: list[str] = []
    if path.exists():
        lines = path.read_text().splitlines()
        if lines:
            changes = compare(json.loads(lines[-1]), row, settings["change_threshold"])
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = {k: row.get(k) for k in ("fingerprint", "measured_at", *TRACKED)}
    with open(path, "a") as handle:
        handle.write(json.dumps(kept, default=str) + "\n")
    return changes
