"""Each stage after the cells writes one output the next reads: the run's link
comparison is computed once (by `aggregate`, into results/summary/comparison.parquet)
and read by the tables, the findings, the charts and `compare`; the findings are built
only in splitbench/findings and read back only as data (findings.json), never as the
Markdown they are rendered to."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from splitbench.compare import comparison, run_compare
from splitbench.contracts import findings_file, results
from splitbench.findings import collect
from tests.conftest import ROOT
from tests.support import stages
from tests.support.matrices import CONTEXTS, ORDER


def small_run(tmp_path: Path) -> tuple[Path, list[str], list[str]]:
    """Two links' cells and link results (stages.two_links), and where their results go."""
    return tmp_path / "results", *stages.two_links(tmp_path)


def test_the_link_comparison_is_computed_once_and_read_by_every_stage_after(
        tmp_path, monkeypatch):
    calls = []
    compare_links = comparison.compare_links

    def counted(*args, **kwargs):
        calls.append(args)
        return compare_links(*args, **kwargs)

    monkeypatch.setattr(comparison, "compare_links", counted)
    root, requests, links = small_run(tmp_path)
    summary_path = str(root / "summary" / "cells.parquet")
    summary = stages.aggregate(requests, links, CONTEXTS, summary_path,
                                  str(root / "tables"), baseline_link="fast")
    written = Path(results.under(root, results.COMPARISON))
    assert written.exists() and len(calls) == 1
    found = collect.run(summary_path, str(written), results.under(root, results.WHATIF),
                        links, [], [], None, CONTEXTS, "fast", str(root / "findings.md"),
                        str(root / "findings.json"))
    costs = run_compare.link_costs(root, summary, run_compare.drift(root, summary))
    assert len(calls) == 1, "a stage after the aggregate compared the links again"
    # What they read is what the aggregate wrote: slow costs 1 ms/token at each context.
    assert set(costs["link"]) == {"slow"} and (costs["decode_delta_ms"] - 1.0).abs().max() < 1e-9
    assert any(f.headline.startswith("slow costs decode +1.00") for f in found)


def test_findings_json_holds_what_the_markdown_says(tmp_path):
    root, requests, links = small_run(tmp_path)
    summary_path = str(root / "summary" / "cells.parquet")
    stages.aggregate(requests, links, CONTEXTS, summary_path, str(root / "tables"),
                        baseline_link="fast")
    found = collect.run(summary_path, results.under(root, results.COMPARISON),
                        results.under(root, results.WHATIF), links, [], [], None, CONTEXTS,
                        "fast", str(root / "findings.md"), str(root / "findings.json"))
    records = findings_file.read(root / "findings.json")
    assert json.loads((root / "findings.json").read_text())["format"] == findings_file.FORMAT
    assert [r["markdown"] for r in records] == [f.markdown() for f in found]
    markdown = (root / "findings.md").read_text()
    for record in records:
        assert record["markdown"] in markdown
        if record["headline"]:
            mark = "✗ " if record["failed"] else "⚠ " if record["flagged"] else ""
            assert f"**{mark}{record['headline']}**" in markdown
        for ref in record["refs"]:
            assert f"]({'#' + ref['anchor']})" in markdown
    # The glance table opens the Markdown, its figures are in the file.
    assert markdown.startswith("## Findings\n\n### At a glance\n\n| model | link |")
    glanced = json.loads((root / "findings.json").read_text())["glance"]
    assert {(r["link"], r["ctx"]) for r in glanced} == {("slow", ctx) for ctx in ORDER}
    assert all(abs(r["decode_delta_ms"] - 1.0) < 1e-9 for r in glanced)
    # The run's last lines: what did not work first (no drift step ran), then headlines.
    said = findings_file.headlines(records)
    assert said[0].startswith("✗ drift: not run")
    assert any(line.startswith("m: slow costs decode +1.00") for line in said), said


# Modules allowed to name findings.md: where its path is defined, the page that renders
# it, and the checks that name it to a person.
NAMES_FINDINGS_MD = {"splitbench/contracts/results.py", "splitbench/report/page.py",
                     "splitbench/health/checks.py"}


def test_only_the_findings_build_findings_and_nobody_reads_the_markdown_back():
    """A Finding is made, and a module of splitbench.findings imported, only in
    splitbench/findings (and by the command that runs it); results.FINDINGS (the
    Markdown) is named only where it is defined, rendered, or named to a person."""
    builders, markdown_readers = [], []
    for path in sorted((ROOT / "splitbench").rglob("*.py")):
        name = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text())
        inside = name.startswith(("splitbench/findings/", "splitbench/report/"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "splitbench.findings") and not inside and \
                    name != "splitbench/commands/findings.py":
                builders.append(f"{name}: imports {node.module}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Finding" \
                    and not name.startswith("splitbench/findings/"):
                builders.append(f"{name}:{node.lineno}: Finding(...)")
            if isinstance(node, ast.Attribute) and node.attr == "FINDINGS" and \
                    name not in NAMES_FINDINGS_MD:
                markdown_readers.append(f"{name}:{node.lineno}")
    assert builders == []
    assert markdown_readers == []


def test_only_the_comparison_module_and_old_runs_compare_links():
    """Every call of compare_links in the package: the run's comparison, and `compare`
    reading a run aggregated before the comparison was written."""
    calls = []
    for path in sorted((ROOT / "splitbench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and "compare_links" in (
                    getattr(node.func, "id", ""), getattr(node.func, "attr", "")):
                calls.append(str(path.relative_to(ROOT)))
    assert sorted(calls) == ["splitbench/compare/comparison.py",
                             "splitbench/compare/run_compare.py"]
