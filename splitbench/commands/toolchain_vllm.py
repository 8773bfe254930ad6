"""`toolchain-vllm`: record both hosts' vLLM of a pair (a failed record is a result the
pair's vLLM blocks report)."""

from __future__ import annotations

import argparse

from splitbench.backends.vllm import setup, toolchain
from splitbench.slice_check import typed
from splitbench.slices import HostsSlice

HELP = "record both hosts' vLLM"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", required=True)
    p.add_argument("--hosts", type=typed(HostsSlice), required=True)
    p.add_argument("--venv", default=setup.DEFAULT_VENV,
                   help="the vLLM environment of hosts that name none")
    p.add_argument("--out", required=True)


def run(args: argparse.Namespace) -> None:
    data = toolchain.record(args.pair, args.hosts, args.venv, args.out)
    if data["status"] == "failed":
        print(f"vLLM of pair {args.pair} FAILED: {data['error']}")
    else:
        print(f"vLLM of pair {args.pair}: {data['a']['vllm']['version']} on both hosts")
