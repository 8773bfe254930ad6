"""`launch`: one block's servers (pair x link x model), by the model's backend, or the
record of why they could not be launched (a result its cells report)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from splitbench import backends
from splitbench.contracts import registry
from splitbench.contracts.slice_check import typed
from splitbench.contracts.slices import LinkSlice, ServerSettings

HELP = "launch (or reuse) the servers of one block"
MEASURING = True


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--link-spec", type=typed(LinkSlice), required=True)
    p.add_argument("--settings", type=typed(ServerSettings), required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--toolchain", required=True, help="the pair's toolchain record of "
                                                     "the model's backend")
    p.add_argument("--out", required=True)


def run(args: argparse.Namespace) -> None:
    model = json.loads(Path(args.model).read_text())
    backend = backends.get(args.settings.get("backend", registry.DEFAULT))
    tools = json.loads(Path(args.toolchain).read_text())
    record = backend.launch_record(args.link_spec, args.settings, model, tools)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1))
    if record.get("status") == "failed":
        # A result, not a crash of the workflow: the block's cells report it.
        print(f"launch FAILED: {record['error']}")
    else:
        print(f"launch {record['launch_id']} ({backend.name}): loaded in "
              f"{record.get('load_s')} s")


