"""The results layout has one owner: paths are built and parsed in splitbench.contracts.results,
and nowhere else in the package or the rules."""

from __future__ import annotations

import ast
import re

import pandas as pd
import pytest

from splitbench.contracts import results
from tests.conftest import ROOT


def test_builders_fill_the_rules_patterns():
    assert results.cell("lab", "usb4", "synth", "5k", 2) == results.CELL.format(
        pair="lab", link="usb4", model="synth", ctx="5k", conc=2)
    assert results.cell_requests("lab", "usb4", "synth", "5k", 2).endswith(
        "lab/usb4/synth/ctx5k_c2.requests.parquet")
    assert results.anchor("lab", "synth", "end", requests=True) == \
        "results/anchors/lab/synth/end.requests.parquet"
    assert results.cell("p", "l", "m", "c", 1, root="/data/run1") == \
        "/data/run1/cells/p/l/m/ctxc_c1.parquet"


@pytest.mark.parametrize(("path", "expected"), [
    ("results/cells/lab/usb4/synth/ctx5k_c2.requests.parquet",
     {"pair": "lab", "link": "usb4", "model": "synth", "ctx": "5k", "conc": 2, "repeat": 0}),
    ("/x/cells/p/l/m/ctx32k_c4_r3.parquet",
     {"pair": "p", "link": "l", "model": "m", "ctx": "32k", "conc": 4, "repeat": 3}),
    ("results/anchors/lab/synth/start.requests.parquet",
     {"pair": "lab", "model": "synth", "when": "start"}),
])
def test_identity_parses_every_measured_file(path, expected):
    assert results.identity(path) == expected


def test_identity_refuses_a_file_outside_the_layout_by_name():
    with pytest.raises(ValueError, match="notes.parquet: not a cell's file"):
        results.identity("results/cells/lab/notes.parquet")


def test_rows_own_identity_wins_over_the_path():
    rows = pd.DataFrame({"pair": ["lab"], "link": ["a"], "model": ["m"], "ctx": ["short"],
                         "conc": [1], "repeat": [2], "status": ["ok"]})
    assert results.with_identity(rows, "anything.parquet", results.IDENTITY) is rows
    legacy = results.with_identity(rows[["status"]], "results/cells/p/l/m/ctxs_c4.parquet",
                                   results.IDENTITY)
    assert legacy.iloc[0][results.IDENTITY].tolist() == ["p", "l", "m", "s", 4, 0]


def test_archive_paths_mirror_the_measured_ones(tmp_path):
    path = tmp_path / "results/cells/p/l/m/ctxs_c1.parquet"
    assert results.kept(path) == tmp_path / "results/.kept/cells/p/l/m/ctxs_c1.parquet"
    moved = results.archived(path, "20261201T000000Z")
    assert moved == tmp_path / "results/archive/20261201T000000Z/cells/p/l/m/ctxs_c1.parquet"
    assert results.archived_when(moved) == "20261201T000000Z"
    assert results.kept(tmp_path / "one-off.parquet") is None


def _string_literals(source: str) -> list[str]:
    """Every string constant that is not a docstring."""
    tree = ast.parse(source)
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)
            and node.body and isinstance(node.body[0], ast.Expr)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]


def test_no_module_but_results_spells_a_results_path():
    spelled = {str(path.relative_to(ROOT)): hits
               for path in (ROOT / "splitbench").rglob("*.py") if path.name != "results.py"
               if (hits := [s for s in _string_literals(path.read_text())
                            if re.search(r"results/|\.requests\.parquet|ctx\{", s)])}
    assert not spelled


def test_no_rule_spells_a_results_path():
    lines = [f"{path.name}: {line.strip()}" for path in (ROOT / "rules").glob("*.smk")
             for line in path.read_text().splitlines()
             if '"results/' in line or "'results/" in line]
    snakefile = [line for line in (ROOT / "Snakefile").read_text().splitlines()
                 if '"results/' in line]
    assert not lines and not snakefile
