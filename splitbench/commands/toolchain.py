"""`toolchain`: record both hosts' llama.cpp builds of a pair (a failed record is a result
the pair's blocks report)."""

from __future__ import annotations

import argparse

from splitbench.backends.llamacpp import toolchain
from splitbench.slice_check import typed
from splitbench.slices import HostsSlice

HELP = "record both hosts' llama.cpp builds"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--hosts", type=typed(HostsSlice), required=True)
    p.add_argument("--out", required=True)


def run(args: argparse.Namespace) -> None:
    data = toolchain.record(args.pair, args.source, args.hosts, args.out)
    if data["status"] == "failed":
        # A result, not a crash of the workflow: the pair's blocks report it, and the
        # run's checks fail on it after the report.
        print(f"toolchain of pair {args.pair} FAILED: {data['error']}")
    else:
        print(f"toolchain of pair {args.pair}: build {data['a']['build_id']} on both hosts")
