"""The commands of `python -m splitbench <command>`: one module each, named as its command
(`roundtrips-table` is `roundtrips_table.py`), listed once in `NAMES`.

A command module holds only the command line: `HELP`, `arguments(parser)` (its flags,
which the rules pass), `run(args)` (what it does, by calling its stage's package) and,
when it drives servers on a pair, `MEASURING = True` (the run records its processes, so
teardown stops what it started). `splitbench.cli` imports only the command asked for.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# What a person runs, in the order `--help` lists them.
BY_A_PERSON = ("doctor", "whatif", "compare", "cells", "teardown", "packet-helper")
# What the workflow's rules run, in the order a run meets them, and those of them that
# drive a pair (`MEASURING` in their modules).
BY_A_RULE = ("toolchain", "model", "link", "launch", "cell", "roundtrips",
             "roundtrips-table", "aggregate", "link-comparison", "tables", "drift",
             "findings", "charts", "report", "checks")
DRIVING = ("link", "launch", "cell", "roundtrips")
NAMES = BY_A_PERSON + BY_A_RULE


def load(name: str) -> ModuleType:
    """The module of a command in NAMES."""
    return importlib.import_module(f"{__name__}.{name.replace('-', '_')}")
