"""vLLM's tensor or pipeline parallel across the pair, as the cells see it
(splitbench.backends.Backend)."""

from __future__ import annotations

from splitbench.backends.base import ModuleBackend
from splitbench.backends.vllm import client, metrics, prompts, servers


class Vllm(ModuleBackend):
    """vLLM's API server and rank 0 on host A, rank 1 on host B."""

    name = "vllm"
    servers, client, metrics, prompts = servers, client, metrics, prompts


BACKEND = Vllm()
