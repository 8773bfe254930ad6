import gguf
import numpy as np

from splitbench import models

SPEC = {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_head_kv": 2, "n_ff": 128,
        "n_vocab": 512, "context_length": 4096, "seed": 3}


def test_synthetic_model_is_deterministic(tmp_path):
    a = models.write_synthetic(SPEC, tmp_path / "a.gguf")
    b = models.write_synthetic(SPEC, tmp_path / "b.gguf")
    c = models.write_synthetic({**SPEC, "seed": 4}, tmp_path / "c.gguf")
    assert a == b != c


def test_synthetic_model_has_llama_shapes_and_tokenizer(tmp_path):
    path = tmp_path / "m.gguf"
    models.write_synthetic(SPEC, path)
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
