"""splitbench.remote is shipped to host B as source and run by a bare Python 3 there: it
may import nothing but the standard library, not even at function level."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from splitbench import remote

REMOTE = sorted(p for p in Path(remote.__file__).parent.glob("*.py") if p.name != "__init__.py")


def imported_modules(source: str) -> set[str]:
    """Top-level names of every module the source imports, wherever the import sits."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # a relative import reaches into the package: not shippable
                names.add(f"relative import from .{node.module or ''}")
            else:
                names.add(node.module.split(".")[0])
    return names


def test_there_is_remote_code_to_check():
    assert {p.stem for p in REMOTE} >= {"probe", "sensors", "linkfacts"}


@pytest.mark.parametrize("path", REMOTE, ids=lambda p: p.stem)
def test_remote_module_imports_only_the_standard_library(path):
    outside = imported_modules(path.read_text()) - set(sys.stdlib_module_names) - {"__future__"}
    assert not outside, f"{path.name} imports {sorted(outside)}: host B has only a bare Python"


def test_the_import_check_catches_a_function_level_import():
    source = "import os\n\ndef f():\n    import numpy as np\n    from splitbench import plan\n"
    assert imported_modules(source) - set(sys.stdlib_module_names) == {"numpy", "splitbench"}


@pytest.mark.parametrize("path", REMOTE, ids=lambda p: p.stem)
def test_remote_module_loads_in_an_isolated_interpreter(path):
    """-I -S: no site-packages, no user paths, no splitbench on the path; the module's
    source is executed as it is on host B (not as __main__, so nothing runs)."""
    code = f"src = open({str(path)!r}).read(); exec(compile(src, 'remote', 'exec'), {{}})"
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
