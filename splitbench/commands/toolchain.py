"""`toolchain`: record both hosts' toolchain of a pair for one backend (llama.cpp's
build by default; a failed record is a result the pair's blocks report)."""

from __future__ import annotations

import argparse

from splitbench import backends
from splitbench.contracts import registry
from splitbench.contracts.slice_check import typed
from splitbench.contracts.slices import HostsSlice

HELP = "record both hosts' toolchain of a backend (llama.cpp's build by default)"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", required=True)
    p.add_argument("--backend", default=registry.DEFAULT,
                   help=f"whose toolchain (default {registry.DEFAULT})")
    p.add_argument("--source", help="the config's toolchain.source (the default "
                                    "backend's build)")
    p.add_argument("--hosts", type=typed(HostsSlice), required=True)
    p.add_argument("--out", required=True)


def run(args: argparse.Namespace) -> None:
    backend = backends.get(args.backend)
    data = backend.record_toolchain(args.pair, args.hosts, args.out, args.source)
    named = backends.label(backend.name)
    if data["status"] == "failed":
        # A result, not a crash of the workflow: the pair's blocks report it, and the
        # run's checks fail on it after the report.
        print(f"{named} toolchain of pair {args.pair} FAILED: {data['error']}")
    else:
        print(f"{named} toolchain of pair {args.pair}: the same on both hosts")
