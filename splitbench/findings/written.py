"""The findings written: results/findings.md (the glance table, then a heading per
section and a bullet per finding with links to the tables and charts behind it) and
results/findings.json (the same findings as data, with the glance table's figures)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from splitbench.contracts import findings_file
from splitbench.findings import glance
from splitbench.findings.text import Finding
from splitbench.infra import files


def markdown(found: Sequence[Finding], glance_table: str = "") -> str:
    """The findings as Markdown: the glance table (glance.markdown) first, then a heading
    per section, a bullet per finding, each ending with links to the tables and charts
    behind it."""
    lines = ["## Findings", ""]
    if not found:
        return "\n".join([*lines, "Nothing was measured, so nothing was found.", ""])
    if glance_table:
        lines += [glance_table, ""]
    sections: dict[str, list[Finding]] = {}
    for f in found:
        sections.setdefault(f.section, []).append(f)
    for section, items in sections.items():
        lines += [f"### {section}", ""]
        for f in items:
            refs = f" → {', '.join(r.markdown() for r in f.refs)}" if f.refs else ""
            lines.append(f"- {f.markdown()}{refs}")
        lines.append("")
    return "\n".join(lines)


def write(found: Sequence[Finding], costs: list[dict], contexts: Sequence[str],
          markdown_out: str | Path, data_out: str | Path) -> None:
    """findings.md, and the same findings as data (findings.json: each one's section,
    headline, text, flags and refs, and the glance table's figures), which the run's
    checks and `compare` read."""
    Path(markdown_out).parent.mkdir(parents=True, exist_ok=True)
    Path(markdown_out).write_text(markdown(found, glance.markdown(costs, contexts)))
    with files.replacing(Path(data_out)) as tmp:
        tmp.write_text(findings_file.as_json([f.record() for f in found], costs))
