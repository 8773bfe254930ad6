"""vLLM's tensor or pipeline parallel across the pair, as the cells see it
(splitbench.backends.Backend)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from splitbench.backends.base import ModuleBackend, host_row
from splitbench.backends.vllm import api, servers
from splitbench.contracts.records import ModelInfo, ToolchainRecord
from splitbench.contracts.slices import HostsSlice, ModelSlice, ServerSettings

if TYPE_CHECKING:  # the typed config is planning's: a cell's job does not import it
    from splitbench.configuration import Config


class Vllm(ModuleBackend):
    """vLLM's API server and rank 0 on host A, rank 1 on host B."""

    name = "vllm"
    label = "vLLM"
    split_labels = {"tp2": "vLLM TP=2", "pp2": "vLLM PP=2"}
    split_layouts = {"tp2": "every layer split across A and B", "pp2": "half the layers"}
    model_format = "hf"
    own_toolchain = True
    servers, api = servers, api

    def check_model(self, where: str, model: ModelSlice, config: Config
                    ) -> None:
        from splitbench.backends.vllm import checks

        checks.check_model(where, model, config)

    def record_toolchain(self, pair: str, hosts: HostsSlice, out: str,
                         source: str | None = None) -> ToolchainRecord:
        """Each host's vLLM (its host key `vllm_venv`, else the workflow's .venv-vllm):
        one version on both."""
        from splitbench.backends.vllm import setup, toolchain

        return toolchain.record(pair, hosts, setup.DEFAULT_VENV, out)

    def toolchain_rows(self, record: ToolchainRecord) -> list[dict[str, Any]]:
        """Each host's vLLM version and where it is installed."""
        return [{**host_row(record, side),
                 "vLLM version": (record.get(side) or {}).get("vllm", {}).get("version"),
                 "venv": (record.get(side) or {}).get("vllm", {}).get("venv")}
                for side in ("a", "b")]

    def describe_model(self, model: ModelSlice, path: str | Path | None) -> ModelInfo:
        """Its Hugging Face directory (`hf_model`): a synthetic model's, written by the
        model stage, or the config's `path`."""
        from splitbench.backends.vllm import hf_model

        return hf_model.describe_hf(model, path if model.get("synthetic") else model["path"])

    def server_settings(self, model: ModelSlice, slots: int, tokens: int
                        ) -> ServerSettings:
        """Its split, one sequence per request of the largest concurrency level, and a
        length that holds `tokens` (with llama.cpp's margin), capped by a synthetic
        model's trained context as llama.cpp caps its slots (a longer prompt then meets
        the context wall, as it would there)."""
        from splitbench.backends.vllm.section import VllmSpec  # planning's
        from splitbench.configuration import defaults

        settings = {"backend": "vllm", **defaults(VllmSpec),
                    **model.get("vllm", {})}
        trained = (model.get("synthetic") or {}).get("context_length", 131072)
        settings.update(slots=slots, max_model_len=min(tokens + 64, trained))
        if not settings.get("extra_args"):
            settings.pop("extra_args", None)
        return settings

    def missing_here(self, config: Config) -> str | None:
        """This machine's vLLM, for a vLLM model on an embedded pair (an SSH host B's is
        checked by its toolchain job)."""
        from splitbench.backends.vllm import setup

        return setup.missing(config)

    def write_synthetic(self, synthetic: dict[str, int], path: str) -> None:
        from splitbench.backends.vllm import hf_model

        hf_model.write_synthetic_hf(synthetic, path)

    def split(self, settings: ServerSettings) -> str:
        """Tensor (tp2) or pipeline (pp2) parallel. Its ranks connect on ports of their
        own choosing: every connection between the link's addresses is its traffic
        (the base's `traffic`)."""
        return "tp2" if settings.get("tensor_parallel") == 2 else "pp2"


BACKEND = Vllm()
