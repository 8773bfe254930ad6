"""Every Parquet a stage writes says its results format, and what an older file lacks is
brought up to the current format in one place (summary/upgrade.py)."""

from __future__ import annotations

import ast

import pandas as pd

from splitbench.contracts import results
from splitbench.infra import parquet_io
from tests.conftest import ROOT

# The one writer of results (provenance and format in the metadata), and the aggregate's
# own cache of per-cell rows beside the summary (read back only by itself).
WRITERS = {"splitbench/infra/parquet_io.py", "splitbench/infra/memo.py"}


def test_a_written_file_says_its_format_and_a_file_without_one_reads_as_format_0(tmp_path):
    parquet_io.write(pd.DataFrame({"a": [1]}), tmp_path / "new.parquet", {"rows": 1})
    pd.DataFrame({"a": [1]}).to_parquet(tmp_path / "old.parquet")
    assert parquet_io.results_format(tmp_path / "new.parquet") == results.FORMAT >= 1
    assert parquet_io.results_format(tmp_path / "old.parquet") == 0


def test_no_module_but_the_writer_writes_parquet():
    """A Parquet written past parquet_io.write would carry no format and no provenance."""
    found = []
    for path in sorted((ROOT / "splitbench").rglob("*.py")):
        name = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            call = node.func if isinstance(node, ast.Call) else None
            writes = call is not None and (
                getattr(call, "attr", "") == "to_parquet" or
                (getattr(call, "attr", "") == "write_table"
                 and getattr(getattr(call, "value", None), "id", "") == "pq"))
            if writes and name not in WRITERS:
                found.append(f"{name}:{node.lineno}")
    assert found == []


def test_only_the_upgrade_step_reads_identity_from_a_path_for_request_rows():
    """The request readers' shims live in summary/upgrade.py: a reader that fills a
    row's identity from its file's path itself is a second copy."""
    users = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "splitbench").rglob("*.py")
                   if "missing_identity(" in p.read_text())
    assert users == ["splitbench/contracts/results.py", "splitbench/summary/upgrade.py"]
