"""What llama.cpp's RPC split refuses in a model section, before anything starts (its
backend's `check_model`). Reads the config's sections only: imported when the workflow
plans."""

from __future__ import annotations

from splitbench.configuration import Config, ConfigError, check_workers
from splitbench.contracts.slices import ModelSlice

# Flags splitbench sets on llama-server and ggml-rpc-server itself: a model's own
# server_args / worker_args may not set them (a second value would silently win or
# clash with what the launch record says).
SERVER_OWNED = {"--rpc", "-m", "--model", "-ngl", "--gpu-layers", "--n-gpu-layers", "-c",
                "--ctx-size", "-np", "--parallel", "--host", "--port", "-t", "--threads",
                "--fit", "--cache-ram", "--metrics", "-lv", "--verbosity", "--log-verbosity"}
WORKER_OWNED = {"-H", "--host", "-p", "--port", "-t", "--threads"}


def check_model(where: str, model: ModelSlice, config: Config) -> None:
    """A llama.cpp model: layers_on_b given and within the model, a layer for each RPC
    worker, and none of splitbench's own flags in server_args or worker_args."""
    if "layers_on_b" not in model:
        raise ConfigError(f"{where}.layers_on_b", "required for backend llamacpp")
    check_workers(f"{where}.workers", model.get("workers", 1), where, model)
    _check_own_flags(where, model)
    synth = model.get("synthetic")
    if synth and model["layers_on_b"] > synth["n_layer"]:
        raise ConfigError(f"{where}.layers_on_b", f"{model['layers_on_b']} exceeds the "
                          f"model's {synth['n_layer']} layers")


def _check_own_flags(where: str, model: ModelSlice) -> None:
    for key, owned in (("server_args", SERVER_OWNED), ("worker_args", WORKER_OWNED)):
        extra = set()
        if key == "server_args" and model.get("workers", 1) > 1:
            extra = {"-ts", "--tensor-split"}  # set to share B's layers among workers
        for arg in model.get(key) or []:
            flag = str(arg).split("=", 1)[0]
            if flag in owned | extra:
                raise ConfigError(f"{where}.{key}",
                                  f"'{flag}' is set by splitbench itself; remove it")
