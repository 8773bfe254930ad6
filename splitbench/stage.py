"""A stage of the workflow as a command: `python -m splitbench <name> ...`.

Each stage module declares its own `STAGES`: the arguments its rule passes and what it
runs. `splitbench.cli` only loops over them. Rules pass config slices as JSON arguments
(never shell strings) and name every file the stage writes.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int | None]
    # Drives servers on a pair: recorded while it runs, so teardown stops what it started.
    measuring: bool = False


def json_arg(text: str) -> dict:
    """An argument that is a JSON object (a config slice)."""
    return json.loads(text)
