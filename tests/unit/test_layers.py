"""The stage packages look down only: remote < infra < links < backends < cells <
analysis < report < workflow (what the rules bind) < commands (what the rules run). A
module imports from its own package or one below it, never one above; so no two packages
import each other."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

LAYERS = ("remote", "infra", "links", "backends", "cells", "analysis", "report", "workflow",
          "commands")


def upward_imports(root: Path = ROOT) -> set[tuple[str, str]]:
    found = set()
    package = root / "splitbench"
    for path in package.rglob("*.py"):
        where = path.relative_to(package)
        if len(where.parts) < 2 or where.parts[0] not in LAYERS:
            continue
        mine = LAYERS.index(where.parts[0])
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] == "splitbench" and len(parts) > 1 and parts[1] in LAYERS \
                        and LAYERS.index(parts[1]) > mine:
                    found.add((where.as_posix(), ".".join(parts[:3])))
    return found


def test_no_stage_package_imports_one_above_it():
    assert upward_imports() == set()


def test_the_check_sees_an_upward_import(tmp_path):
    """The walk itself: analysis importing report (the circle there was) is found."""
    fake = tmp_path / "splitbench" / "analysis"
    fake.mkdir(parents=True)
    (fake / "x.py").write_text("from splitbench.report import tables\n")
    assert upward_imports(tmp_path) == {("analysis/x.py", "splitbench.report.tables")}
