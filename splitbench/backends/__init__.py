"""Inference backends: what launches a split model over the two hosts and streams its
tokens.

The cells talk to a backend only through `Backend`: a backend is a package
`splitbench/backends/<name>/` whose `backend` module defines `BACKEND`; `get(name)`
finds it. `llamacpp` is llama.cpp's RPC split; `vllm` is vLLM's tensor or pipeline
parallel across the pair. What every backend shares lies here: the streaming client and
its packet clock, the request row's client figures, prompts, and the launch records.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class Launch(Protocol):
    """A running launch: where it serves, its identity, its record, and whether its
    processes still run."""

    url: str
    launch_id: str
    fingerprint: str
    record: dict[str, Any]

    def alive(self) -> bool: ...


@dataclass(frozen=True)
class Backend:
    """What measuring a cell needs of an inference backend."""

    name: str
    # (link, settings, model_path, model_sha, toolchain, slot="") -> Launch: reuse the
    # running launch when its fingerprint matches, start one otherwise.
    ensure: Callable[..., Launch]
    # (pair, slot="") -> None: stop the pair's launch in that slot.
    stop: Callable[..., None]
    # Errors `ensure` raises for a launch that did not come up: a result, not a crash.
    launch_errors: tuple[type[Exception], ...]
    healthy: Callable[[str], bool]
    # (url) -> what `prompt` draws from; (pool, tokens, nonce) -> one uncacheable prompt.
    prompt_pool: Callable[[str], Any]
    prompt: Callable[[Any, int, int], Any]
    # (url, prompts, n_predict, timeout, on_first_token=None) -> one reply per prompt,
    # every token timestamped on arrival.
    stream: Callable[..., list[Any]]
    # (reply, prompt_tokens, n_predict, server_alive, crash_below_tps) -> request row.
    request_row: Callable[..., dict[str, Any]]
    # (link_spec, settings, model, toolchain) -> the launch stage's record: the block's
    # servers launched (or reused), or why they could not be (status "failed").
    launch_record: Callable[..., dict[str, Any]]


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
