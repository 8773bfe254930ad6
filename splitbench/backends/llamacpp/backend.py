"""llama.cpp's RPC backend as the cells see it (splitbench.backends.Backend)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from splitbench.backends.base import Backend, Launch
from splitbench.backends.client import Reply
from splitbench.backends.llamacpp import client, metrics, servers
from splitbench.backends.llamacpp import prompts as served_prompts
from splitbench.links.link import Link


class LlamaCpp(Backend):
    """llama-server on host A, one ggml-rpc-server per worker on host B."""

    name = "llamacpp"

    def ensure(self, link: Link, settings: dict[str, Any], model_path: str,
               model_sha: str, toolchain: dict[str, Any], slot: str = "") -> Launch:
        return servers.ensure(link, settings, model_path, model_sha, toolchain, slot)

    def launch_record(self, link_spec: dict[str, Any], settings: dict[str, Any],
                      model: dict[str, Any], toolchain: dict[str, Any]) -> dict[str, Any]:
        return servers.launch_record(link_spec, settings, model, toolchain)

    def prompt_pool(self, url: str) -> list[int]:
        return served_prompts.token_pool(url)

    def stream(self, url: str, prompts: Sequence[list[int]], n_predict: int,
               timeout: float, on_first_token: Callable[..., Any] | None = None
               ) -> list[Reply]:
        return client.run_concurrent(url, list(prompts), n_predict, timeout, on_first_token)

    def request_row(self, reply: Reply, prompt_tokens: int, n_predict: int,
                    server_alive: bool, crash_below_tps: float) -> dict[str, Any]:
        return metrics.request_row(reply, prompt_tokens, n_predict, server_alive,
                                   crash_below_tps)


BACKEND = LlamaCpp()
