"""vLLM's model format: a Hugging Face directory (config.json, model.safetensors,
tokenizer.json), written for a `synthetic` model from the same weights as its GGUF, and
described for the model record as a GGUF is (`splitbench.backends.llamacpp.gguf_model`)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import TypedDict

import numpy as np

from splitbench.backends.model_files import (
    RMS_EPS,
    ROPE_THETA,
    ModelHeader,
    directory_sha256,
    synthetic_weights,
    vocabulary,
)
from splitbench.contracts.records import ModelInfo
from splitbench.contracts.slices import ModelSlice


def write_synthetic_hf(spec: dict[str, int], directory: str | Path) -> str:
    """Write the model of a `synthetic` block as a Hugging Face directory (config.json,
    model.safetensors, tokenizer.json) for backends that load no GGUF (vLLM): the same
    architecture, weights and vocabulary as `write_synthetic`'s GGUF. Returns a sha256
    over the directory's files."""
    from safetensors.numpy import save_file  # only the vLLM backend's models need it

    directory = Path(directory)
    tmp = directory.with_name(f".{directory.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    n_head, n_head_kv = spec["n_head"], spec.get("n_head_kv", spec["n_head"])
    tensors = {}
    for name, tensor in synthetic_weights(spec).items():
        parts = name.split(".")  # blk.<i>.<part>.weight, or <part>.weight
        if parts[0] == "blk":
            hf_name = f"model.layers.{parts[1]}.{_HF_NAMES[parts[2]]}"
        else:
            hf_name = _HF_NAMES[parts[0]]
        # llama.cpp's GGUF orders the rotary halves of q and k interleaved; Hugging Face
        # keeps them in halves: undo that permutation so both compute the same function.
        if name.endswith("attn_q.weight"):
            tensor = _unpermute(tensor, n_head)
        elif name.endswith("attn_k.weight"):
            tensor = _unpermute(tensor, n_head_kv)
        tensors[hf_name] = np.ascontiguousarray(tensor.astype(np.float16))
    save_file(tensors, str(tmp / "model.safetensors"))
    (tmp / "config.json").write_text(json.dumps(_hf_config(spec), indent=1))
    _hf_tokenizer(spec["n_vocab"], tmp)
    shutil.rmtree(directory, ignore_errors=True)
    tmp.replace(directory)
    return directory_sha256(directory)


# GGUF tensor names (the block's part) -> Hugging Face Llama names.
_HF_NAMES = {
    "token_embd": "model.embed_tokens.weight", "output_norm": "model.norm.weight",
    "output": "lm_head.weight", "attn_norm": "input_layernorm.weight",
    "attn_q": "self_attn.q_proj.weight", "attn_k": "self_attn.k_proj.weight",
    "attn_v": "self_attn.v_proj.weight", "attn_output": "self_attn.o_proj.weight",
    "ffn_norm": "post_attention_layernorm.weight", "ffn_gate": "mlp.gate_proj.weight",
    "ffn_up": "mlp.up_proj.weight", "ffn_down": "mlp.down_proj.weight",
}


def _unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
    """The inverse of llama.cpp's converter's q/k permutation (per head, the two rotary
    halves interleaved pairwise)."""
    rows, cols = weight.shape
    return (weight.reshape(heads, rows // heads // 2, 2, cols).swapaxes(1, 2)
            .reshape(rows, cols))


class HfConfig(TypedDict):
    """A synthetic model's Hugging Face config.json (`_hf_config`)."""

    architectures: list[str]
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    hidden_act: str
    bos_token_id: int
    eos_token_id: int
    tie_word_embeddings: bool
    torch_dtype: str


def _hf_config(spec: dict[str, int]) -> HfConfig:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": spec["n_embd"], "intermediate_size": spec["n_ff"],
        "num_hidden_layers": spec["n_layer"], "num_attention_heads": spec["n_head"],
        "num_key_value_heads": spec.get("n_head_kv", spec["n_head"]),
        "vocab_size": spec["n_vocab"],
        "max_position_embeddings": spec.get("context_length", 131072),
        "rms_norm_eps": RMS_EPS, "rope_theta": ROPE_THETA, "hidden_act": "silu",
        "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
        "torch_dtype": "float16",
    }


def _hf_tokenizer(n_vocab: int, directory: Path) -> None:
    """The GGUF's vocabulary as a tokenizers BPE without merges and with byte fallback:
    text encodes to the same byte tokens llama.cpp's tokenizer gives it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    pieces, _, _ = vocabulary(n_vocab)
    tokenizer = Tokenizer(models.BPE(vocab={p: i for i, p in enumerate(pieces)}, merges=[],
                                     unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581",
                                                       prepend_scheme="first")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("\u2581", " "),
                                           decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(" ", 1, 0)])
    tokenizer.add_special_tokens(["<unk>", "<s>", "</s>"])
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
        "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": False,
        "add_eos_token": False, "clean_up_tokenization_spaces": False}, indent=1))


def hf_header(directory: str | Path) -> ModelHeader:
    """What a Hugging Face directory's config.json says the model is, in the fields the
    GGUF header gives (`header`)."""
    config = json.loads((Path(directory) / "config.json").read_text())
    return {
        "architecture": config.get("model_type"),
        "name": config.get("_name_or_path") or Path(directory).name,
        "n_layer": config.get("num_hidden_layers"),
        "n_embd": config.get("hidden_size"),
        "n_head": config.get("num_attention_heads"),
        "n_head_kv": config.get("num_key_value_heads"),
        "n_vocab": config.get("vocab_size"),
        "context_length": config.get("max_position_embeddings"),
        "quantization": config.get("torch_dtype") or config.get("dtype"),
        "tied_output": bool(config.get("tie_word_embeddings")),
    }


def describe_hf(spec: ModelSlice, directory: str | Path) -> ModelInfo:
    """A vLLM model's record: its directory, what identifies it (a synthetic one's
    files' hash; a given one's files' sizes and times, as a large GGUF's) and its
    config."""
    directory = Path(directory).expanduser()
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(f"{directory} is not a Hugging Face model directory (no "
                                "config.json)")
    if spec.get("synthetic"):
        ident = directory_sha256(directory)
    else:
        stats = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                       for p in directory.iterdir() if p.is_file())
        ident = "files-" + hashlib.sha256(json.dumps(stats).encode()).hexdigest()
    try:
        found = hf_header(directory)
    except (OSError, ValueError) as exc:
        found = {"error": f"not a readable config.json: {type(exc).__name__}: {exc}"}
    return {"path": str(directory.resolve()), "sha256": ident,
            "synthetic": bool(spec.get("synthetic")), "backend": "vllm", "hf": found}
