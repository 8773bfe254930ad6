"""llama.cpp's keys in the config (`splitbench.configuration.owned` composes them): a
model's split and its servers' extra arguments, at the model's top level (the default
backend's keys are the model's own: `models.<m>.layers_on_b`), and each host's build."""

from __future__ import annotations

from splitbench.configuration.keys import Section, key, required

# The delay sweep (`roundtrips:`) counts this backend's blocking round trips per token:
# its RPC workers' turns (configuration.swept_models).
SWEEPS_ROUND_TRIPS = True


class LlamaCppModel(Section):
    layers_on_b: int = required("backend llamacpp: -ngl K, the output layer plus the last "
                                "K-1 blocks run on host B (required)", ge=1)
    server_args: list[str] = key(description="extra llama-server arguments (e.g. "
                                             "[--no-repack]); flags splitbench sets itself "
                                             "are refused. Part of the launch settings: "
                                             "changing them re-runs this model's launches "
                                             "and cells")
    worker_args: list[str] = key(description="extra ggml-rpc-server arguments (e.g. [-c] "
                                             "for its cache); -H, -p and -t are "
                                             "splitbench's")
    workers: int = key(1, "ggml-rpc-server processes on host B (a port each, from the "
                          "run's first); B's layers are split evenly across them and A "
                          "hands activations from one to the next", ge=1, le=4)


class LlamaCppHost(Section):
    bin_dir: str = key(description="directory holding llama-server and ggml-rpc-server "
                                   "(toolchain.source = path)")


MODEL, HOST = LlamaCppModel, LlamaCppHost
