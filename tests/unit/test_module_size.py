"""No module is longer than 500 lines, the tests' and the benchmarks' included: past
that, a module holds more than one idea and a reader loses its thread."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ROOT

LIMIT = 500
FOLDERS = ("splitbench", "tests", "benchmarks")


def too_long(root: Path = ROOT) -> dict[str, int]:
    """Every Python module under FOLDERS longer than LIMIT lines, with its length."""
    found = {}
    for folder in FOLDERS:
        for path in (root / folder).rglob("*.py"):
            lines = len(path.read_text().splitlines())
            if lines > LIMIT:
                found[path.relative_to(root).as_posix()] = lines
    return found


def test_no_module_is_longer_than_the_limit():
    assert too_long() == {}


def test_the_check_counts_every_folder(tmp_path):
    for folder, lines in (("splitbench/x", LIMIT + 1), ("tests/unit", LIMIT),
                          ("benchmarks", LIMIT + 40)):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "m.py").write_text("pass\n" * lines)
    assert too_long(tmp_path) == {"splitbench/x/m.py": LIMIT + 1, "benchmarks/m.py": LIMIT + 40}
