"""Inference backends: what launches a split model over the two hosts and streams its
tokens.

The cells talk to a backend only through `Backend` (`base.py`: an abstract base with a
typed method for each thing they ask): a backend is a package
`splitbench/backends/<name>/` whose `backend` module defines `BACKEND`, an instance of
its subclass; `get(name)` finds it. `llamacpp` is llama.cpp's RPC split; `vllm` is
vLLM's tensor or pipeline parallel across the pair. What every backend shares lies
here: the streaming client and its packet clock, the request row's client figures,
prompts, and the launch records.
"""

from __future__ import annotations

import importlib
from typing import Any

from splitbench.backends.base import Backend, Launch

__all__ = ["Backend", "Launch", "get", "split"]


def split(settings: dict[str, Any]) -> str:
    """How a launch's settings split the model across the hosts: "rpc" (llama.cpp's
    layer split), "tp2" or "pp2" (vLLM's tensor or pipeline parallel)."""
    if settings.get("backend") != "vllm":
        return "rpc"
    return "tp2" if settings.get("tensor_parallel") == 2 else "pp2"


def get(name: str = "llamacpp") -> Backend:
    """The backend called `name` (its package's `backend.BACKEND`)."""
    try:
        module = importlib.import_module(f"splitbench.backends.{name}.backend")
    except ModuleNotFoundError as error:
        raise ValueError(f"no backend '{name}' (splitbench/backends/{name}/backend.py)") \
            from error
    return module.BACKEND
