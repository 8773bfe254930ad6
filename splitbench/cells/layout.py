"""What decides the bytes a token moves across the link, on every row of a cell: the
model's width and vocabulary and how the launch split it."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from splitbench import backends
from splitbench.contracts import registry
from splitbench.contracts.records import LaunchRecord, ModelInfo

if TYPE_CHECKING:  # model_files imports numpy: not at a cell's start
    from splitbench.backends.model_files import ModelHeader


class Layout(TypedDict):
    """The model's shape and the launch's split, on every row of a cell (`layout`)."""

    model_n_embd: int | None
    model_n_vocab: int | None
    blocks_on_b: int | None
    output_on_b: bool | None
    rpc_workers: int | None
    backend: str
    split: str
    model_shape: str | None


def layout(model: ModelInfo, launch: LaunchRecord | None) -> Layout:
    """What decides the bytes a token moves across the link: the model's width and
    vocabulary (its GGUF header or Hugging Face config) and how the launch split it: where
    llama.cpp put its layers (the server's log), or vLLM's tensor or pipeline split."""
    header = backends.model_header(model)
    launch = launch or {}
    where = launch.get("placement") or {}
    settings = launch.get("settings") or {}
    return {
        "model_n_embd": header.get("n_embd"),
        "model_n_vocab": header.get("n_vocab"),
        "blocks_on_b": where.get("blocks_on_b"),
        "output_on_b": where.get("output_on_b"),
        "rpc_workers": len(launch["worker_ports"]) if launch.get("worker_ports") else None,
        "backend": settings.get("backend", registry.DEFAULT),
        # How the model is split across the hosts: llama.cpp's RPC layer split, or vLLM's
        # tensor (tp2) or pipeline (pp2) parallel.
        "split": backends.split(settings),
        # The model's shape, whatever its file: models of one shape are compared across
        # backends (the backends table).
        "model_shape": shape(header),
    }


def shape(header: ModelHeader) -> str | None:
    """A model's architecture in one word: layers x width, heads / KV heads, vocabulary."""
    if not header.get("n_layer"):
        return None
    return (f"{header['n_layer']}x{header['n_embd']} h{header['n_head']}/"
            f"{header.get('n_head_kv') or header['n_head']} v{header['n_vocab']}")
