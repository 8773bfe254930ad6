"""llama.cpp's model format: a synthetic model written as a GGUF (architecture llama)
that llama.cpp loads, and what any GGUF is, from its header (the model record)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf

from splitbench.backends.model_files import (
    RMS_EPS,
    ModelHeader,
    ModelOrigin,
    file_sha256,
    synthetic_weights,
    vocabulary,
)
from splitbench.contracts.records import ModelInfo
from splitbench.contracts.slices import ModelSlice
from splitbench.infra import files


def write_synthetic(spec: dict[str, int], path: str | Path) -> str:
    """Write the model described by a `synthetic` config block as a GGUF; returns its
    sha256."""
    path = Path(path)
    with files.replacing(path) as tmp:
        _write_gguf(spec, tmp)
    return file_sha256(path)


def _write_gguf(spec: dict[str, int], tmp: Path) -> None:
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name("splitbench-synthetic")
    writer.add_context_length(spec.get("context_length", 131072))
    writer.add_embedding_length(spec["n_embd"])
    writer.add_block_count(spec["n_layer"])
    writer.add_feed_forward_length(spec["n_ff"])
    writer.add_head_count(spec["n_head"])
    writer.add_head_count_kv(spec.get("n_head_kv", spec["n_head"]))
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    tokens, scores, types = vocabulary(spec["n_vocab"])
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    for name, tensor in synthetic_weights(spec).items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def header(path: str | Path) -> ModelHeader:
    """What the GGUF says it is: architecture, name, layers, width, heads, vocabulary,
    trained context and quantization (the fields a link's bytes per token depend on)."""
    reader = gguf.GGUFReader(str(path))

    def field(key: str) -> Any:
        found = reader.fields.get(key)
        if found is None or not found.data:
            return None
        value = found.parts[found.data[0]]
        if found.types and found.types[0] == gguf.GGUFValueType.STRING:
            return bytes(value).decode(errors="replace")
        return value.tolist()[0] if hasattr(value, "tolist") else value

    arch = field("general.architecture")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    file_type = field("general.file_type")
    try:
        quantization = gguf.LlamaFileType(file_type).name if file_type is not None else None
    except ValueError:
        quantization = f"file type {file_type}"
    names = {t.name for t in reader.tensors}
    return {
        "architecture": arch,
        "name": field("general.name"),
        "n_layer": field(f"{arch}.block_count"),
        "n_embd": field(f"{arch}.embedding_length"),
        "n_head": field(f"{arch}.attention.head_count"),
        "n_head_kv": field(f"{arch}.attention.head_count_kv"),
        "n_vocab": len(tokens.data) if tokens is not None else None,
        "context_length": field(f"{arch}.context_length"),
        "quantization": quantization,
        # Without an output tensor the output layer reuses the token embeddings.
        "tied_output": "output.weight" not in names,
    }


def describe(spec: ModelSlice, gguf_path: str | Path | None,
             origin: ModelOrigin | None = None) -> ModelInfo:
    """Where a model's GGUF is, what identifies it and what it is (its header). A
    backend that loads another format describes its models itself
    (`backends.describe_model`, which comes here for a GGUF).

    Synthetic files are hashed (small); a file from PyPI has the configured hash, which
    the model stage checked; a local file is identified by size and mtime, since hashing
    tens of gigabytes on every run would cost minutes.
    """
    if spec.get("synthetic"):
        path = Path(gguf_path)
        out = {"path": str(path.resolve()), "sha256": file_sha256(path), "synthetic": True}
    elif spec.get("source"):
        path = Path(gguf_path)
        out = {"path": str(path.resolve()), "sha256": spec["source"]["sha256"],
               "synthetic": False, "source": origin or spec["source"]}
    else:
        path = Path(spec["path"]).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"model file {path} does not exist")
        stat = path.stat()
        out = {"path": str(path.resolve()),
               "sha256": f"size{stat.st_size}-mtime{stat.st_mtime_ns}", "synthetic": False}
    try:
        found = header(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable file: the server will say more
        # The launch then fails with the server's own reason, and that is the block's
        # result; a model record that raised here would cost the whole report instead.
        found = {"error": f"not a readable GGUF header: {type(exc).__name__}: {exc}"}
    return {**out, "gguf": found}
