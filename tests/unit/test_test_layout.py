"""The tests mirror the package: test modules under unit/, integration/ and workflow/,
what several of them share in the package tests/support/, and no test module imports
another (a helper one test defines and another borrows goes to tests/support/)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

TESTS = ROOT / "tests"


def imported(path: Path) -> set[str]:
    """The modules of tests/ that a file imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name.split(".")[0] == "tests"}


def test_no_test_module_imports_another():
    borrowed = {f"{path.relative_to(ROOT)}: {name}"
                for path in TESTS.rglob("test_*.py")
                for name in imported(path) if name.rsplit(".", 1)[-1].startswith("test_")}
    assert borrowed == set()


def test_helpers_live_in_tests_support_alone():
    loose = {str(path.relative_to(ROOT)) for path in TESTS.rglob("*.py")
             if not path.name.startswith("test_")
             and path.name not in ("conftest.py", "__init__.py")
             and TESTS / "support" not in path.parents
             and TESTS / "backends" not in path.parents  # a backend folder, as a user's
             and path.parent.name != "fixtures"}  # the script that writes its data
    assert loose == set()
