"""`teardown`: stop every process and namespace this run started, and nothing else."""

from __future__ import annotations

import argparse

from splitbench.infra import teardown

HELP = "stop every process and namespace this run started"


def arguments(p: argparse.ArgumentParser) -> None:
    """No flags: what to stop is what the run recorded."""


def run(args: argparse.Namespace) -> None:
    for line in teardown.teardown():
        print(line)
