"""The vLLM backend's pure parts: config checks, launch settings, the synthetic model
as a Hugging Face directory, the stream's events and the request row."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import yaml

from splitbench import backends, configuration
from splitbench.backends import model_files
from splitbench.backends.client import Reply
from splitbench.backends.vllm import api, hf_model, setup
from splitbench.backends.vllm import checks as vllm_checks
from splitbench.configuration import parsed
from splitbench.matrix import plan
from tests.conftest import ROOT

EXAMPLE = ROOT / "config/examples/backends.yaml"


def example() -> dict:
    config = yaml.safe_load(EXAMPLE.read_text())
    plan.names_as_text(config)
    return config


@pytest.mark.parametrize(("mutate", "key"), [
    (lambda c: c["models"]["tp"]["vllm"].update(pipeline_parallel=2), "models.tp.vllm"),
    (lambda c: c["models"]["tp"].update(vllm={}), "models.tp.vllm"),
    (lambda c: c["models"]["tp"].update(layers_on_b=1), "models.tp.layers_on_b"),
    (lambda c: c["models"]["tp"]["synthetic"].update(n_head=8), "models.tp.synthetic.n_head"),
    (lambda c: c["models"]["tp"]["synthetic"].update(n_head=2, n_head_kv=1),
     "models.tp.synthetic.n_head_kv"),
    (lambda c: c["models"]["tp"]["vllm"].update(extra_args=["--port=9"]),
     "models.tp.vllm.extra_args"),
    (lambda c: c["models"]["rpc"].update(vllm={"tensor_parallel": 2}), "models.rpc.vllm"),
    (lambda c: c["models"]["rpc"].pop("layers_on_b"), "models.rpc.layers_on_b"),
    (lambda c: c.update(roundtrips={"models": ["tp"]}), "roundtrips.models"),
], ids=["both-splits", "no-split", "llamacpp-key", "head-width", "odd-kv-heads",
        "own-flag", "vllm-without-backend", "llamacpp-without-layers", "sweep-of-vllm"])
def test_a_vllm_model_that_cannot_run_is_refused_naming_its_key(mutate, key):
    config = copy.deepcopy(example())
    config["models"] = copy.deepcopy(config["models"])
    for spec in config["models"].values():  # the YAML anchor shares one shape
        spec["synthetic"] = dict(spec["synthetic"])
    mutate(config)
    with pytest.raises(configuration.ConfigError, match=f"'{key}'"):
        backends.check_models(configuration.parsed(config))


def test_an_ssh_pair_names_where_host_b_keeps_vllm():
    config = example()
    config["pairs"]["lab"] = {"mode": "ssh", "hosts": {"a": {}, "b": {"ssh": "b@h"}},
                              "links": {"plain": {"interface_a": "a0", "interface_b": "b0",
                                                  "adopt": True},
                                        "narrow": {"interface_a": "a1", "interface_b": "b1",
                                                   "adopt": True}}}
    with pytest.raises(configuration.ConfigError, match="hosts.b.vllm_venv"):
        backends.check_models(configuration.parsed(config))
    config["pairs"]["lab"]["hosts"]["b"]["vllm_venv"] = "/opt/vllm"
    backends.check_models(configuration.parsed(config))


def test_a_vllm_launch_holds_the_longest_prompt_and_leaves_llamacpp_settings_alone():
    config = example()
    tp = plan.server_slice(parsed(config), "tp")
    assert tp["backend"] == "vllm" and tp["tensor_parallel"] == 2
    assert tp["pipeline_parallel"] == 1 and tp["dtype"] == "bfloat16"
    assert tp["max_model_len"] == 512 + 32 + 64 and tp["slots"] == 2
    assert "extra_args" not in tp  # unset keys stay out of the launch's params
    config["contexts"]["huge"] = 8150
    assert plan.server_slice(parsed(config), "tp")["max_model_len"] == 8192  # the trained length
    # A llama.cpp model's settings carry no backend key: its launches and cells keep
    # the params they were measured with.
    assert "backend" not in plan.server_slice(parsed(config), "rpc")


def test_the_synthetic_model_as_a_directory_holds_the_ggufs_weights(tmp_path):
    from safetensors.numpy import load_file

    spec = example()["models"]["tp"]["synthetic"]
    hf_model.write_synthetic_hf(spec, tmp_path / "m.hf")
    tensors = load_file(str(tmp_path / "m.hf/model.safetensors"))
    gguf = model_files.synthetic_weights(spec)
    assert np.array_equal(tensors["lm_head.weight"], gguf["output.weight"])
    assert np.array_equal(tensors["model.layers.1.mlp.down_proj.weight"],
                          gguf["blk.1.ffn_down.weight"])
    # q and k: llama.cpp's converter permutes the rotary halves; the directory holds the
    # weights that permutation turns into the GGUF's.
    heads, kv = spec["n_head"], spec["n_head_kv"]
    assert np.array_equal(_permute(tensors["model.layers.0.self_attn.q_proj.weight"], heads),
                          gguf["blk.0.attn_q.weight"])
    assert np.array_equal(_permute(tensors["model.layers.0.self_attn.k_proj.weight"], kv),
                          gguf["blk.0.attn_k.weight"])
    config = json.loads((tmp_path / "m.hf/config.json").read_text())
    assert config["num_key_value_heads"] == kv and config["vocab_size"] == spec["n_vocab"]
    described = backends.describe_model({"synthetic": spec, "backend": "vllm"}, tmp_path / "m.hf")
    assert described["hf"]["n_embd"] == spec["n_embd"] and described["backend"] == "vllm"
    assert described["sha256"] == hf_model.write_synthetic_hf(spec, tmp_path / "again.hf")


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of q and k."""
    return (weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def test_the_directorys_tokenizer_encodes_text_as_the_ggufs_does(tmp_path):
    from tokenizers import Tokenizer

    spec = example()["models"]["tp"]["synthetic"]
    hf_model.write_synthetic_hf(spec, tmp_path / "m.hf")
    tokenizer = Tokenizer.from_file(str(tmp_path / "m.hf/tokenizer.json"))
    pieces, _, _ = model_files.vocabulary(spec["n_vocab"])
    ids = tokenizer.encode("Hé").ids  # byte fallback: ▁ (3 bytes), H, é (2 bytes)
    assert [pieces[i] for i in ids] == ["<0xE2>", "<0x96>", "<0x81>", "<0x48>", "<0xC3>",
                                        "<0xA9>"]
    assert tokenizer.decode([pieces.index("\u2581t7"), pieces.index("\u2581t8")]) == "t7 t8"


def _event(**fields) -> dict:
    return {"id": "c", "object": "text_completion", **fields}


def test_each_event_adds_the_tokens_it_carries_and_the_usage_closes_the_reply():
    reply = Reply(request_id=0)
    api.take_event(_event(choices=[{"text": "", "token_ids": [7]}]), 10, 1, reply)
    api.take_event(_event(choices=[{"text": "ab", "token_ids": [8, 9]}]), 20, 2, reply)
    api.take_event(_event(choices=[{"text": "", "token_ids": []}]), 25, 3, reply)
    api.take_event(_event(choices=[{"text": "c", "token_ids": [4],
                                       "finish_reason": "length"}]), 30, 4, reply)
    final = _event(choices=[], usage={"prompt_tokens": 5, "completion_tokens": 4},
                   metrics={"time_to_first_token_ms": 3.0, "mean_itl_ms": 6.5,
                            "generation_time_ms": 19.5})
    api.take_event(final, 40, 5, reply)
    assert [t["token_id"] for t in reply.tokens] == [7, 8, 9, 4]
    assert [t["t_ns"] for t in reply.tokens] == [10, 20, 20, 30]  # two in one event
    assert [t["chunk_tokens"] for t in reply.tokens] == [1, 2, 2, 1]
    assert reply.final["usage"]["completion_tokens"] == 4
    assert reply.final["finish_reason"] == "length"


def test_the_request_row_takes_the_servers_own_figures():
    reply = Reply(request_id=0, t_send_ns=0, http_status=200)
    for i, t in enumerate([10_000_000, 16_000_000, 22_000_000, 29_000_000]):
        api.take_event(_event(choices=[{"token_ids": [i]}]), t, t, reply)
    api.take_event(_event(choices=[], usage={"prompt_tokens": 5, "completion_tokens": 4},
                             metrics={"time_to_first_token_ms": 9.0, "mean_itl_ms": 6.2,
                                      "generation_time_ms": 18.6}), 30_000_000, 0, reply)
    row = api.request_row(reply, 5, 4, True, 1.0)
    assert row["status"] == "ok" and row["prompt_tokens"] == 5
    assert row["decode_ms_per_token"] == pytest.approx(19 / 3)
    assert row["server_decode_ms_per_token"] == 6.2 and row["server_ttft_ms"] == 9.0
    assert row["server_prefill_tps"] == pytest.approx(5 / 0.009)
    assert row["cache_n"] == 0


def test_a_prompt_past_the_model_length_is_the_context_wall():
    reply = Reply(request_id=0, http_status=400, error_type="BadRequestError",
                  error_text='{"error": {"message": "This model\'s maximum context length '
                             'is 608 tokens. However, your prompt contains 700 input tokens"}}')
    assert api.request_row(reply, 700, 32, True, 1.0)["status"] == "ctx_wall"


def test_an_engine_that_says_it_died_is_a_crash_even_before_its_server_exits():
    reply = Reply(request_id=0, http_status=200)
    api.take_event(_event(choices=[{"token_ids": [1]}]), 1, 1, reply)
    api.take_event({"error": {"message": "EngineCore encountered an issue. See stack "
                                            "trace (above) for the root cause.",
                                 "type": "InternalServerError", "code": 500}}, 2, 2, reply)
    row = api.request_row(reply, 8, 32, True, 1.0)  # /health still answered
    assert row["status"] == "crash"


def test_a_missing_vllm_stops_the_plan_naming_the_install_command(tmp_path):
    config = example()
    config["pairs"]["lab"]["hosts"]["a"]["vllm_venv"] = str(tmp_path / "none")
    why = setup.missing(parsed(config))
    assert why and "./bootstrap.sh vllm" in why and str(tmp_path / "none") in why
    # the workflow asks each backend the config uses what this machine lacks
    from splitbench import backends
    from splitbench.workflow import preflight

    assert [b.name for b in backends.used(parsed(config))] == ["llamacpp", "vllm"]
    with pytest.raises(preflight.PreflightError, match="./bootstrap.sh vllm"):
        preflight.checked(config)
    config["models"] = {"rpc": config["models"]["rpc"]}
    assert setup.missing(parsed(config)) is None  # no vLLM model: nothing to install
    assert preflight.checked(config)


@pytest.mark.parametrize(("arg", "owned"), [
    ("--port=9", "--port"), ("--master_addr=192.0.2.1", "--master-addr"),
    ("--master-a", "--master-addr"), ("--config", "any flag (a config file)"),
    ("--config=x.yaml", "any flag (a config file)"), ("-tp", "-tp"),
    ("--max-num-batched-tokens=64", None), ("--enforce-eager", None), ("--m", None)])
def test_every_spelling_of_an_own_vllm_flag_is_refused(arg, owned):
    assert vllm_checks.vllm_owned(arg) == owned


def test_each_local_host_keeps_its_own_vllm_cache_in_its_users_home(tmp_path, monkeypatch):
    """Outside the workflow directory, so a second one does not start cold; mode 0700,
    since the ranks load and run what is in it; one folder per host of the machine."""
    from splitbench.backends.vllm import servers
    from splitbench.infra.hosts import Host

    monkeypatch.setenv("HOME", str(tmp_path))
    roots = [servers._cache_root(Host(name)) for name in ("a", "b")]
    assert roots == [str(tmp_path / ".cache/splitbench/vllm-local" / n) for n in "ab"]
    assert (tmp_path / ".cache/splitbench/vllm-local").stat().st_mode & 0o777 == 0o700
    assert servers._cache_root(Host("a")) == roots[0]  # found again, not made anew
    # A home that cannot hold it: the run's own state directory, as before.
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("HOME", str(tmp_path / "file"))
    monkeypatch.setenv("SPLITBENCH_STATE", str(tmp_path / "state"))
    assert servers._cache_root(Host("b")) == str(tmp_path / "state/vllm-cache/b")


def test_the_sweep_counts_only_a_backend_whose_section_has_one():
    """The delay sweep counts round trips per token where a backend's config section
    declares it (llama.cpp's RPC workers): by default it sweeps those models alone, and
    a vLLM model named for it is refused, naming the backends that have one."""
    config = example()
    assert configuration.swept_models(configuration.parsed(config)) == ["rpc"]
    config = {**config, "roundtrips": {"models": ["tp"]}}
    with pytest.raises(configuration.ConfigError,
                       match=r"backend vllm has none to count \(backends with a sweep: "
                             r"llamacpp\)"):
        configuration.parsed(config)
