"""llama.cpp's RPC backend as the cells see it (splitbench.backends.Backend)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from splitbench.backends.base import Launch, ModuleBackend
from splitbench.backends.llamacpp import api, servers
from splitbench.infra.telemetry import RpcTraffic
from splitbench.links.link import Link
from splitbench.slices import ModelSlice, ServerSettings

if TYPE_CHECKING:
    from splitbench.configuration import Config


class LlamaCpp(ModuleBackend):
    """llama-server on host A, one ggml-rpc-server per worker on host B."""

    name = "llamacpp"
    servers, api = servers, api

    def check_model(self, where: str, model: ModelSlice, config: Config) -> None:
        from splitbench.backends.llamacpp import checks  # the config model: planning only

        checks.check_model(where, model, config)

    def server_settings(self, model: ModelSlice, slots: int, tokens: int
                        ) -> ServerSettings:
        """One slot per request, each holding `tokens` plus a small margin, rounded up
        to 256 tokens (llama.cpp's slot granularity); B's layers and threads."""
        per_slot = -(-(tokens + 64) // 256) * 256
        settings: ServerSettings = {
            "layers_on_b": model["layers_on_b"],
            "threads": model["threads"],
            "slots": slots,
            "ctx_per_slot": per_slot,
            "n_ctx": slots * per_slot,
        }
        # Only when set: a new key in params would relaunch every existing block.
        if model.get("workers", 1) > 1:
            settings["workers"] = model["workers"]
        for key in ("server_args", "worker_args"):
            if model.get(key):
                settings[key] = list(model[key])
        return settings

    def split(self, settings: ServerSettings) -> str:
        return "rpc"  # the layer split: blocks and the output layer on B's workers

    def traffic(self, link: Link, launch: Launch) -> RpcTraffic:
        """A's connections to the RPC workers (through a delay relay where there is
        one): exactly the split's traffic."""
        ports = launch.record.get("worker_ports", [link.ports.worker(0)])
        return RpcTraffic(link.connect_addr, ports)


BACKEND = LlamaCpp()
