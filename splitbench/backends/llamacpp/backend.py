"""llama.cpp's RPC backend as the cells see it (splitbench.backends.Backend)."""

from __future__ import annotations

from splitbench.backends.base import ModuleBackend
from splitbench.backends.llamacpp import client, metrics, prompts, servers


class LlamaCpp(ModuleBackend):
    """llama-server on host A, one ggml-rpc-server per worker on host B."""

    name = "llamacpp"
    servers, client, metrics, prompts = servers, client, metrics, prompts


BACKEND = LlamaCpp()
