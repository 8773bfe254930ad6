"""vLLM's keys in the config (`splitbench.configuration.owned` composes them): a model's
`vllm:` section and each host's vLLM environment."""

from __future__ import annotations

from typing import Literal

from splitbench.configuration.keys import Section, key


class VllmSpec(Section):
    """How a model with backend vllm is split across the pair: vLLM's own multi-node
    mode, rank 0 (the API server) on host A, the headless rank 1 on host B."""

    tensor_parallel: int = key(1, "tensor parallel size: 2 splits every layer across "
                                  "the hosts", applied="schema", ge=1, le=2)
    pipeline_parallel: int = key(1, "pipeline parallel size: 2 puts half the layers on "
                                    "each host", applied="schema", ge=1, le=2)
    dtype: Literal["bfloat16", "float32", "float16"] = key(
        "bfloat16", "the weights' and activations' type (vLLM's CPU build runs bfloat16 "
                    "and float32)", applied="schema")
    kv_cache_gib: float = key(1, "KV cache per rank, GiB (VLLM_CPU_KVCACHE_SPACE)",
                              applied="schema", gt=0)
    launch_timeout_s: float = key(600, "longest start-up before the launch counts as "
                                       "failed (a rank 0 whose peer never joins waits "
                                       "forever by itself)", applied="schema", gt=0)
    step_timeout_s: float = key(60, "longest model step before vLLM gives up on a dead "
                                    "peer (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS)",
                                applied="schema", gt=0)
    extra_args: list[str] = key(description="extra `vllm serve` arguments; flags "
                                            "splitbench sets itself are refused")


class VllmHost(Section):
    vllm_venv: str = key(description="models with backend vllm: the virtual environment "
                                     "holding vLLM on this host (default: the workflow's "
                                     ".venv-vllm, which ./bootstrap.sh vllm makes; required "
                                     "for an SSH host B)")


MODEL, HOST = VllmSpec, VllmHost
