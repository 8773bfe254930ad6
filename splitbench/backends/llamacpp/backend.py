"""llama.cpp's RPC backend as the cells see it (splitbench.backends.Backend)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from splitbench.backends.base import Launch, ModuleBackend, host_row
from splitbench.backends.llamacpp import api, servers
from splitbench.contracts.records import ToolchainRecord
from splitbench.contracts.slices import HostsSlice, ModelSlice, ServerSettings
from splitbench.infra.telemetry import RpcTraffic
from splitbench.links.link import Link

if TYPE_CHECKING:
    import pandas as pd

    from splitbench.configuration import Config, Pair
    from splitbench.links.readiness import Line


class LlamaCpp(ModuleBackend):
    """llama-server on host A, one ggml-rpc-server per worker on host B."""

    name = "llamacpp"
    label = "llama.cpp"
    split_labels = {"rpc": "llama.cpp RPC"}
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

    def doctor_lines(self, config: Config, pair: str, spec: Pair) -> list[Line]:
        from splitbench.backends.llamacpp import toolchain  # the doctor's, not a cell's

        return toolchain.doctor_lines(config.toolchain.source, pair, spec.hosts.given())

    def record_toolchain(self, pair: str, hosts: HostsSlice, out: str,
                         source: str | None = None) -> ToolchainRecord:
        """The pair's record (results.TOOLCHAIN): both hosts ready (the doctor's host
        checks) and running the same build."""
        from splitbench.backends.llamacpp import toolchain

        if source is None:
            raise ValueError("llama.cpp's toolchain record needs toolchain.source")
        return toolchain.record(pair, source, hosts, out)

    def purge(self) -> list[str]:
        """Each host B's tensor cache (the weights its workers were sent)."""
        from splitbench.backends.llamacpp import tensor_cache

        return list(tensor_cache.purge())

    def toolchain_rows(self, record: ToolchainRecord) -> list[dict[str, Any]]:
        """Each host's llama-server version and build, and the two binaries' hashes."""
        rows = []
        for side in ("a", "b"):
            host = record.get(side) or {}
            rows.append({
                **host_row(record, side),
                "llama-server version": host.get("llama_server_version"),
                "build id": host.get("build_id"), "source": record.get("source"),
                "package": host.get("package"),
                "llama-server sha256": (host.get("llama-server_sha256") or "")[:16],
                "ggml-rpc-server sha256": (host.get("ggml-rpc-server_sha256") or "")[:16],
                "bin dir": host.get("bin_dir"),
            })
        return rows

    def split(self, settings: ServerSettings) -> str:
        return "rpc"  # the layer split: blocks and the output layer on B's workers

    def traffic(self, link: Link, launch: Launch) -> RpcTraffic:
        """A's connections to the RPC workers (through a delay relay where there is
        one): exactly the split's traffic."""
        ports = launch.record.get("worker_ports", [link.ports.worker(0)])
        return RpcTraffic(link.connect_addr, ports)

    def predict_traffic(self, cells: pd.DataFrame, baseline_link: str | None
                        ) -> pd.DataFrame:
        from splitbench.backends.llamacpp import traffic_model  # the report's, not a cell's

        return traffic_model.with_predictions(cells, baseline_link)

    def traffic_terms(self, row: pd.Series | dict[str, Any]) -> str:
        from splitbench.backends.llamacpp import traffic_model

        return traffic_model.a_to_b_text(row)

    def layout_of(self, row: pd.Series | dict[str, Any]) -> str:
        from splitbench.backends.llamacpp import traffic_model

        return traffic_model.layout_text(row)


BACKEND = LlamaCpp()
