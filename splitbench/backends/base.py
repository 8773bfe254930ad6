"""The seam between the cells and an inference backend: `Backend`, an abstract base
with one typed, documented method for each thing a cell or the launch stage asks of a
backend, and `Launch`, what a running launch offers. What every backend does alike
(stopping a slot, the health check, drawing a prompt, the launch errors) is written
here once."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from splitbench.backends import lifecycle, prompts
from splitbench.backends.client import Reply
from splitbench.contracts import registry
from splitbench.contracts.records import LaunchRecord, ModelInfo, ToolchainRecord
from splitbench.contracts.slices import HostsSlice, LinkSlice, ModelSlice, ServerSettings
from splitbench.infra.telemetry import RpcTraffic
from splitbench.links.link import Link

if TYPE_CHECKING:  # metrics imports numpy, which this module does not need at run time
    import pandas as pd

    from splitbench.backends.metrics import RequestRow
    from splitbench.configuration import Config, Pair
    from splitbench.links.readiness import Line


class Launch(Protocol):
    """A running launch: where it serves, its identity, its record, and whether its
    processes still run."""

    url: str
    launch_id: str
    fingerprint: str
    record: LaunchRecord

    def alive(self) -> bool: ...


def host_row(record: ToolchainRecord, side: str) -> dict[str, Any]:
    """What every toolchain row of a host starts with: its pair, the host, and the
    record's status (a pair whose toolchain could not be had: why)."""
    return {"pair": record.get("pair"), "host": side.upper(),
            "status": record.get("status", "ok"), "error": record.get("error")}


def toolchain_failure(toolchain: ToolchainRecord) -> str | None:
    """Why the pair's toolchain could not be had (its record says), or None: for the
    stages that need it."""
    if toolchain.get("status") != "failed":
        return None
    return f"pair {toolchain.get('pair')}: toolchain failed: {toolchain.get('error')}"


class Backend(ABC):
    """What measuring a cell needs of an inference backend. A backend is a package
    `splitbench/backends/<name>/` whose `backend` module defines `BACKEND`, an instance
    of a subclass (`splitbench.backends.get` finds it)."""

    name: ClassVar[str]
    # What the report calls the backend ("" : "backend <name>"), each split it makes (the
    # cell's `split` column) and where each puts the model's layers (a split not named
    # here is shown as written).
    label: ClassVar[str] = ""
    split_labels: ClassVar[dict[str, str]] = {}
    split_layouts: ClassVar[dict[str, str]] = {}
    # The format of the model files it loads: "gguf" (llama.cpp's `gguf_model`), or a format
    # of its own ("hf": a Hugging Face directory), which `write_synthetic` writes and
    # `describe_model` describes.
    model_format: ClassVar[str] = registry.DEFAULT_MODEL_FORMAT
    # Whether it keeps a toolchain record of its own for each pair (results.TOOLCHAIN_OWN,
    # written by `record_toolchain` in the pair's toolchain job of this backend), which
    # each of its launches waits for and is given; False: its launches are given the
    # pair's default record (results.TOOLCHAIN, the default backend's).
    own_toolchain: ClassVar[bool] = False
    # Errors `ensure` raises for a launch that did not come up: a result, not a crash.
    launch_errors: ClassVar[tuple[type[Exception], ...]] = (lifecycle.LaunchError,)

    @abstractmethod
    def ensure(self, link: Link, settings: ServerSettings, model_path: str,
               model_sha: str, toolchain: ToolchainRecord, slot: str = "") -> Launch:
        """A healthy launch of the block on `link` in `slot`: the running one when its
        fingerprint matches, a new one otherwise (whatever ran in the slot stopped)."""

    @abstractmethod
    def launch_record(self, link_spec: LinkSlice, settings: ServerSettings,
                      model: ModelInfo, toolchain: ToolchainRecord) -> LaunchRecord:
        """The launch stage's record: the block's servers launched (or reused), or why
        they could not be (status "failed")."""

    @abstractmethod
    def prompt_pool(self, url: str) -> list[int]:
        """Token ids the served model produces for ordinary text (what `prompt` draws
        from)."""

    @abstractmethod
    def stream(self, url: str, prompts: Sequence[list[int]], n_predict: int,
               timeout: float, on_first_token: Callable[..., Any] | None = None
               ) -> list[Reply]:
        """Send the prompts at once; one reply per prompt, each token timestamped on
        its arrival."""

    @abstractmethod
    def request_row(self, reply: Reply, prompt_tokens: int, n_predict: int,
                    server_alive: bool, crash_below_tps: float) -> RequestRow:
        """One request's row: the client's figures, the server's own, its status."""

    def check_model(self, where: str, model: ModelSlice, config: Config) -> None:
        """Refuse what this backend cannot run, before anything starts: raise
        `splitbench.configuration.ConfigError` naming the key (`where` is the model's,
        "models.<name>"; `config` the whole typed config, for what the model asks of the
        pairs). The config's own checks have passed: the model section is well formed."""
        return None  # nothing to refuse unless the backend says so

    def missing_here(self, config: Config) -> str | None:
        """Why the config's models of this backend cannot run on this machine, checked
        as the workflow plans, before anything starts (None: nothing is missing, or
        what a host lacks is its toolchain job's to say)."""
        return None

    def doctor_lines(self, config: Config, pair: str, spec: Pair) -> list[Line]:
        """The doctor's lines for this backend's toolchain on a pair whose hosts were
        reached (a ✗ says what to do)."""
        return []

    def record_toolchain(self, pair: str, hosts: HostsSlice, out: str,
                         source: str | None = None) -> ToolchainRecord:
        """Describe both hosts' toolchain of this backend (`source`: the config's
        `toolchain.source`, for the default backend's build), write the record at `out`
        and return it: status "ok", or "failed" with why (a result its blocks report)."""
        raise NotImplementedError(f"backend {self.name} keeps no toolchain record")

    def purge(self) -> list[str]:
        """Remove what this backend keeps between runs (`teardown --purge`), a line for
        each thing removed."""
        return []

    def describe_model(self, model: ModelSlice, path: str | Path | None) -> ModelInfo | None:
        """The model record (`backends.describe_model`) of a model in a format of this
        backend's own, at `path` (a synthetic model's, else the config's `path`); None
        for a GGUF, which llama.cpp's `gguf_model` describes."""
        return None

    def write_synthetic(self, synthetic: dict[str, int], path: str) -> None:
        """Write a `synthetic` model block in this backend's format at `path`."""
        from splitbench.backends.llamacpp import gguf_model  # the model job's, not a cell's

        gguf_model.write_synthetic(synthetic, path)

    def server_settings(self, model: ModelSlice, slots: int, tokens: int
                        ) -> ServerSettings:
        """A launch's settings (the launch job's params: a change re-launches), for
        `slots` concurrent requests of up to `tokens` tokens each. By default its
        backend's name, the two counts and the model's own `threads`."""
        return {"backend": self.name, "slots": slots, "max_tokens": tokens,
                "threads": model.get("threads", 1)}

    def toolchain_rows(self, record: ToolchainRecord) -> list[dict[str, Any]]:
        """The report's provenance rows of a pair's toolchain record, one per host: its
        status (a pair whose toolchain could not be had: why), then what the backend
        records of each host's build. By default every plain value the record holds."""
        return [{**host_row(record, side),
                 **{key: value for key, value in (record.get(side) or {}).items()
                    if isinstance(value, str | int | float | bool)}}
                for side in ("a", "b")]

    def split(self, settings: ServerSettings) -> str:
        """How the launch splits the model across the hosts, in a word (the cell's
        `split` column; the backends table compares splits of one model shape)."""
        return self.name

    def predict_traffic(self, cells: pd.DataFrame, baseline_link: str | None
                        ) -> pd.DataFrame | None:
        """This backend's cells (summary rows, at concurrency 1 or more) with the bytes
        a decoded token is predicted to move across the link (compare.traffic's
        PREDICTED columns), from the model's geometry, the split and the context; None
        where it predicts none."""
        return None

    def traffic_terms(self, row: pd.Series | dict[str, Any]) -> str:
        """The A→B prediction of one cell with the terms it is made of, in the report's
        words ("—" where it has none)."""
        return "—"

    def layout_of(self, row: pd.Series | dict[str, Any]) -> str:
        """Where a cell's launch put the model's layers, in the report's words: its
        split's layout (`split_layouts`), else the backend's name."""
        split = row.get("split")
        layout = self.split_layouts.get(split) if isinstance(split, str) else None
        named = self.label or f"backend {self.name}"
        if layout:
            return f"{self.split_labels.get(split, named)}: {layout}"
        return self.label or f"{named}: {split}"

    def traffic(self, link: Link, launch: Launch) -> RpcTraffic:
        """The kernel's counters of what the launch sends across the link during a
        cell: by default every connection between the link's two addresses."""
        return RpcTraffic(link.addr_b, None)

    def stop(self, pair: str, slot: str = "") -> None:
        """Stop the pair's launch in `slot` (either backend's)."""
        lifecycle.stop(pair, slot)

    def healthy(self, url: str) -> bool:
        return lifecycle.healthy(url)

    def prompt(self, pool: list[int], length: int, nonce: int) -> list[int]:
        """Exactly `length` token ids that no earlier prompt shares a prefix with."""
        return prompts.prompt(pool, length, nonce)


class ModuleBackend(Backend):
    """A backend whose parts are modules of its package, each with the function the
    method of the same job calls: `servers` (ensure, launch_record) and `api` (the
    server's HTTP API: run_concurrent, request_row, token_pool)."""

    servers: ClassVar[ModuleType]
    api: ClassVar[ModuleType]

    def ensure(self, link: Link, settings: ServerSettings, model_path: str,
               model_sha: str, toolchain: ToolchainRecord, slot: str = "") -> Launch:
        return self.servers.ensure(link, settings, model_path, model_sha, toolchain, slot)

    def launch_record(self, link_spec: LinkSlice, settings: ServerSettings,
                      model: ModelInfo, toolchain: ToolchainRecord) -> LaunchRecord:
        return self.servers.launch_record(link_spec, settings, model, toolchain)

    def prompt_pool(self, url: str) -> list[int]:
        return self.api.token_pool(url)

    def stream(self, url: str, prompts: Sequence[list[int]], n_predict: int,
               timeout: float, on_first_token: Callable[..., Any] | None = None
               ) -> list[Reply]:
        return self.api.run_concurrent(url, list(prompts), n_predict, timeout,
                                       on_first_token)

    def request_row(self, reply: Reply, prompt_tokens: int, n_predict: int,
                    server_alive: bool, crash_below_tps: float) -> RequestRow:
        return self.api.request_row(reply, prompt_tokens, n_predict, server_alive,
                                    crash_below_tps)
