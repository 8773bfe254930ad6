"""`python -m splitbench <stage> ...`: the commands the workflow's rules run.

Each stage module declares its command (`STAGES`: arguments and what it runs); this
module only finds the one asked for. Only that stage's module is imported, so a quick
command (`teardown`, `cells`) does not pay for the chart libraries.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import socket
import sys
import time
from collections.abc import Iterator

from splitbench.errors import SplitbenchError
from splitbench.infra import procs
from splitbench.stage import Stage

# Stage name -> the module that declares it, in the order a run meets them.
MODULES = {
    "toolchain": "splitbench.backends.llamacpp.toolchain",
    "toolchain-vllm": "splitbench.backends.vllm.toolchain",
    "model": "splitbench.models",
    "link": "splitbench.links.verify",
    "launch": "splitbench.backends.launch",
    "cell": "splitbench.cells.measure",
    "roundtrips": "splitbench.cells.roundtrips",
    "roundtrips-table": "splitbench.analysis.roundtrips_table",
    "aggregate": "splitbench.report.aggregate",
    "drift": "splitbench.analysis.drift",
    "findings": "splitbench.analysis.findings",
    "charts": "splitbench.report.charts",
    "report": "splitbench.report.page",
    "checks": "splitbench.analysis.checks",
    "cells": "splitbench.plan",
    "teardown": "splitbench.infra.teardown",
    "whatif": "splitbench.analysis.whatif",
    "doctor": "splitbench.doctor",
}


def stage(name: str) -> Stage:
    module = importlib.import_module(MODULES[name])
    return next(s for s in module.STAGES if s.name == name)


def parser(names: list[str]) -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="splitbench", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="stage", required=True)
    for name in names:
        declared = stage(name)
        declared.arguments(sub.add_parser(name, help=declared.help))
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    asked = argv[0] if argv and argv[0] in MODULES else None
    args = parser([asked] if asked else list(MODULES)).parse_args(argv)
    declared = stage(args.stage)
    try:
        if declared.measuring:
            with procs.job(args.stage), stamped(args.stage):
                return declared.run(args) or 0
        return declared.run(args) or 0
    except SplitbenchError as error:
        # A problem the message names (a config key, a host, a file): said, not a trace.
        print(f"error: {error}", file=sys.stderr)
        return 2


@contextlib.contextmanager
def stamped(name: str) -> Iterator[None]:
    """A job that drives a pair says in its log when it started and ended, on which
    host: the record of what ran when on a pair (Snakemake's own metadata gives a group
    job's members the group's times)."""
    host = socket.gethostname()
    print(f"splitbench: {name} started at {time.time_ns()} ns on {host}", flush=True)
    try:
        yield
    finally:
        print(f"splitbench: {name} ended at {time.time_ns()} ns on {host}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
