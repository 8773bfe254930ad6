"""Per-file results kept between runs of a stage (infra/memo.py): a changed file is all
that is computed again, and anything doubtful is computed afresh."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from splitbench.infra import memo


class Counting:
    """A computation over files that says which files it was given: one row per line of
    each file, none for an empty file."""

    def __init__(self) -> None:
        self.given: list[str] = []

    def __call__(self, files: list[str]) -> pd.DataFrame:
        self.given += files
        rows = [{"name": Path(f).stem, "line": line}
                for f in files for line in Path(f).read_text().split()]
        return pd.DataFrame(rows, columns=["name", "line"])


def rows(store: Path, paths: list[str], compute, key_of, keys, **options) -> pd.DataFrame:
    """memo.tables of one computation."""
    return memo.tables(store, paths, lambda batch: {"rows": compute(batch)}, key_of, keys,
                       names=("rows",), **options)["rows"]


def key_of(path: str) -> tuple:
    return (Path(path).stem,)


def files(tmp_path: Path, count: int = 4) -> list[str]:
    out = []
    for i in range(count):
        path = tmp_path / f"f{i}.txt"
        path.write_text(" ".join(f"{i}-{j}" for j in range(i)))  # f0 is empty: no rows
        out.append(str(path))
    return out


def test_a_second_pass_computes_only_what_changed(tmp_path):
    paths, store = files(tmp_path), tmp_path / "memo"
    first = Counting()
    every = rows(store, paths, first, key_of, ["name"])
    assert first.given == paths and len(every) == 0 + 1 + 2 + 3
    again = Counting()
    kept = rows(store, paths, again, key_of, ["name"])
    assert again.given == []  # the empty file too: it was computed, and gave no row
    pd.testing.assert_frame_equal(kept, every)
    # One file rewritten (its size and time change): it alone, and its rows replaced.
    Path(paths[2]).write_text("changed")
    os.utime(paths[2], ns=(1, 1))
    third = Counting()
    now = rows(store, paths, third, key_of, ["name"])
    assert third.given == [paths[2]]
    assert list(now["line"]) == ["1-0", "changed", "3-0", "3-1", "3-2"]  # in file order
    # A file dropped from the inputs is dropped from the rows.
    assert list(rows(store, paths[:2], Counting(), key_of, ["name"])["line"]) == ["1-0"]


def test_other_settings_a_torn_store_or_a_changed_dependency_compute_afresh(tmp_path):
    paths, store = files(tmp_path), tmp_path / "memo"
    rows(store, paths, Counting(), key_of, ["name"], settings={"slo": 1})
    other = Counting()
    rows(store, paths, other, key_of, ["name"], settings={"slo": 2})
    assert other.given == paths
    (store / "rows.parquet").write_bytes(b"not parquet")
    torn = Counting()
    rows(store, paths, torn, key_of, ["name"], settings={"slo": 2})
    assert torn.given == paths
    # A file whose rows read another (its baseline) is computed again when that changes.
    depends = {paths[3]: [paths[1]]}
    rows(store, paths, Counting(), key_of, ["name"], depends=lambda f: depends.get(f, []))
    Path(paths[1]).write_text("1-new")
    os.utime(paths[1], ns=(2, 2))
    moved = Counting()
    rows(store, paths, moved, key_of, ["name"], depends=lambda f: depends.get(f, []))
    assert moved.given == [paths[1], paths[3]]


def test_a_large_first_build_is_computed_in_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(memo, "BATCH", 2)
    paths = files(tmp_path, 5)
    calls = []

    def compute(batch: list[str]) -> pd.DataFrame:
        calls.append(len(batch))
        return Counting()(batch)

    out = rows(tmp_path / "memo", paths, compute, key_of, ["name"])
    assert calls == [2, 2, 1] and len(out) == 10


def test_the_code_fingerprint_covers_what_the_computation_imports_and_nothing_else(
        tmp_path, monkeypatch):
    package = tmp_path / "splitbench"
    (package / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "sub/__init__.py": "",
        # an import inside a function and a relative one count as much as a top one
        "sub/rows.py": "from . import helper\n\ndef f():\n    from splitbench import deep\n",
        "sub/helper.py": "X = 1\n",
        "deep.py": "import json\n",
        "report.py": "from splitbench.sub import rows\n",  # imports rows; rows not it
    }
    for name, text in files.items():
        (package / name).write_text(text)
    monkeypatch.setattr(memo, "PACKAGE", package)
    closure = {str(p.relative_to(package)) for p in memo.source_closure(["splitbench.sub.rows"])}
    assert closure == {"__init__.py", "sub/__init__.py", "sub/rows.py", "sub/helper.py",
                       "deep.py"}

    def fingerprint() -> str:
        return memo.code_fingerprint.__wrapped__(("splitbench.sub.rows",))

    before = fingerprint()
    (package / "report.py").write_text("# the report changed\n")
    assert fingerprint() == before  # its rows are kept
    (package / "deep.py").write_text("import json  # changed\n")
    assert fingerprint() != before


def test_the_per_cell_rows_are_kept_through_a_change_to_the_report_or_the_cells_stage():
    from splitbench.summary import aggregate as summary_stage

    closure = {str(p.relative_to(memo.PACKAGE))
               for p in memo.source_closure(summary_stage.PER_CELL_CODE)}
    assert {"summary/percentiles.py", "summary/tail_shift.py", "summary/cell_summary.py",
            "summary/service_levels.py", "contracts/results.py", "infra/memo.py"} <= closure
    assert not {p for p in closure if p.startswith(("report/", "commands/", "workflow/"))}
    assert "cells/measure.py" not in closure and "matrix/plan.py" not in closure
