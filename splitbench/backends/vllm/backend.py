"""vLLM's tensor or pipeline parallel across the pair, as the cells see it
(splitbench.backends.Backend)."""

from __future__ import annotations

from typing import Any

from splitbench.backends.base import ModuleBackend
from splitbench.backends.vllm import client, metrics, prompts, servers


class Vllm(ModuleBackend):
    """vLLM's API server and rank 0 on host A, rank 1 on host B."""

    name = "vllm"
    servers, client, metrics, prompts = servers, client, metrics, prompts

    def split(self, settings: dict[str, Any]) -> str:
        """Tensor (tp2) or pipeline (pp2) parallel. Its ranks connect on ports of their
        own choosing: every connection between the link's addresses is its traffic
        (the base's `traffic`)."""
        return "tp2" if settings.get("tensor_parallel") == 2 else "pp2"


BACKEND = Vllm()
