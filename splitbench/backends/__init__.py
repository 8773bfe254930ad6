"""Inference backends: what launches a split model over the two hosts and streams its
tokens.

The cells talk to a backend only through `Backend` (`base.py`: an abstract base with a
typed method for each thing they ask): a backend is a folder whose `backend` module
defines `BACKEND`, an instance of its subclass: `splitbench/backends/<name>/` for the
two built in, any other folder registered in SPLITBENCH_BACKENDS (splitbench.contracts.registry);
`get(name)` finds it. `llamacpp` is llama.cpp's RPC split; `vllm` is
vLLM's tensor or pipeline parallel across the pair. What every backend shares lies
here: the streaming client and its packet clock, the request row's client figures,
prompts, and the launch records.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from splitbench.backends.base import Backend, Launch
from splitbench.contracts import registry
from splitbench.contracts.records import ModelInfo
from splitbench.contracts.slices import ModelSlice, ServerSettings

if TYPE_CHECKING:
    import pandas as pd

    from splitbench.backends.model_files import ModelHeader, ModelOrigin
    from splitbench.configuration import Config

__all__ = ["Backend", "Launch", "check_models", "default_split", "describe_model", "get",
           "label", "layout_of", "model_header", "name_of", "split", "split_labels", "used"]


def used(config: Config) -> list[Backend]:
    """The backends the config's models name, each once, in the models' order."""
    return [get(name) for name in dict.fromkeys(spec.backend
                                                 for spec in config.models.values())]


def check_models(config: Config) -> None:
    """Each model's backend refuses what it cannot run, before anything starts
    (`Backend.check_model`: a ConfigError naming the key)."""
    for name, spec in config.models.items():
        get(spec.backend).check_model(f"models.{name}", spec.given(), config)


def describe_model(spec: ModelSlice, path: str | Path | None,
                   origin: ModelOrigin | None = None) -> ModelInfo:
    """The model record: its backend's own description of a model in its format
    (`Backend.describe_model`), else the GGUF's (llama.cpp's `gguf_model.describe`)."""
    own = get(name_of(spec)).describe_model(spec, path)
    if own is not None:
        return own
    from splitbench.backends.llamacpp import gguf_model  # gguf: the model job's

    return gguf_model.describe(spec, path, origin)


def model_header(model: ModelInfo) -> ModelHeader:
    """What a model record says the model is (its file's header): under its backend's
    format for the built-in ones ("gguf", "hf"), under "header" for any other; {} where
    the record has none."""
    return model.get(get(name_of(model)).model_format) or model.get("header") or {}


def split(settings: ServerSettings) -> str:
    """How a launch's settings split the model across the hosts: "rpc" (llama.cpp's
    layer split), "tp2" or "pp2" (vLLM's tensor or pipeline parallel), or what a
    registered backend calls its split."""
    return get(name_of(settings)).split(settings)


def split_labels() -> dict[str, str]:
    """Every backend's splits in the report's words: the built-in backends' first, in
    the order the report lists them."""
    labels: dict[str, str] = {}
    for name in registry.names():
        labels.update(get(name).split_labels)
    return labels


def default_split() -> str:
    """The split of a cell measured before cells recorded theirs (the default
    backend's)."""
    return get(registry.DEFAULT).split({})


def label(name: str | None) -> str:
    """What the report calls a backend ("backend <name>" where it names itself nothing)."""
    named = get(name).label if name in registry.names() else ""
    return named or f"backend {name}"


def layout_of(row: pd.Series | dict[str, Any]) -> str:
    """Where a cell's launch put the model's layers, in the report's words, by the
    cell's backend (`Backend.layout_of`; the default where the row names none; one not
    registered here: its name and split)."""
    name = name_of(row)
    if name in registry.names():
        return get(name).layout_of(row)
    return f"backend {name}: {row.get('split')}"


def name_of(record: Mapping[str, Any] | pd.Series) -> str:
    """The backend a record names (a model spec or record, launch settings, a cell's
    row): the default where it names none (written before records named one; a missing
    value in a table)."""
    name = record.get("backend")
    return name if isinstance(name, str) else registry.DEFAULT


def get(name: str = registry.DEFAULT) -> Backend:
    """The backend called `name`: a built-in package's `backend.BACKEND`, or that of a
    folder registered in SPLITBENCH_BACKENDS (splitbench.contracts.registry)."""
    if name not in registry.names():
        raise ValueError(f"no backend '{name}' (built in: {', '.join(registry.BUILT_IN)}; "
                         f"others are registered in {registry.VARIABLE})")
    found = registry.module(name, "backend")
    if found is None:
        raise ValueError(f"backend '{name}' has no backend.py")
    return found.BACKEND
