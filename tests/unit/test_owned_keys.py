"""A backend's keys are its own: declared in its folder's section.py, composed into each
model and host as the config is read (the default backend's at the model's top level,
another's under its name), refused by name where they do not belong, and carried into
the schema and the reference for the built-in backends."""

from __future__ import annotations

import ast

import pytest
from snakemake.utils import validate

from splitbench import configuration
from splitbench.configuration import ConfigError, owned, reference
from splitbench.contracts import registry
from tests.conftest import ROOT, tiny_config

ONETRIP = ROOT / "tests/backends/onetrip"


def test_the_default_backends_keys_are_read_at_the_models_top_level():
    config = configuration.parsed(tiny_config())
    model = config.models["tiny"]
    assert model.layers_on_b == tiny_config()["models"]["tiny"]["layers_on_b"]
    assert model.workers == 1  # its section's default
    # the model's own mapping, as written, is what its jobs get
    assert model.given() == tiny_config()["models"]["tiny"]


def test_another_backends_section_is_read_under_its_name_by_its_own_type(monkeypatch):
    monkeypatch.setenv(registry.VARIABLE, str(ONETRIP))
    raw = tiny_config()
    raw["models"]["toy"] = {"backend": "onetrip", "synthetic": raw["models"]["tiny"]["synthetic"],
                            "onetrip": {"token_bytes": 16}}
    model = configuration.parsed(raw).models["toy"]
    assert type(model.onetrip).__name__ == "OneTripModel" and model.onetrip.token_bytes == 16
    assert model.workers == 1 and model.layers_on_b is None  # the default's, unset


@pytest.mark.parametrize(("change", "key", "said"), [
    ({"layer_on_b": 2}, "models.tiny.layer_on_b", "not a key of a model"),
    ({"vllm": {"tensor_parallel": 2}}, "models.tiny.vllm",
     "backend vllm's section: set backend: vllm"),
    ({"workers": 9}, "models.tiny.workers", "less than or equal to 4"),
    ({"backend": "vllm", "vllm": {"tensor_parallel": 2}, "server_args": ["-fa"]},
     "models.tiny.server_args", "a key of backend llamacpp; this model's backend is vllm"),
    ({"backend": "vllm", "vllm": {"dtype": "int4"}}, "models.tiny.vllm.dtype", "Input should be"),
])
def test_a_key_where_it_does_not_belong_is_refused_by_its_path(change, key, said):
    raw = tiny_config()
    raw["models"]["tiny"].update(change)
    if raw["models"]["tiny"].get("backend") == "vllm":
        del raw["models"]["tiny"]["layers_on_b"]
    with pytest.raises(ConfigError) as refused:
        configuration.parsed(raw)
    assert refused.value.key == key and said in refused.value.problem


def test_a_hosts_keys_are_every_backends_own_and_no_others():
    raw = tiny_config()
    pair = next(iter(raw["pairs"]))
    raw["pairs"][pair]["hosts"]["b"]["vllm_venv"] = "/opt/vllm"
    host = configuration.parsed(raw).pairs[pair].hosts.b
    assert host.vllm_venv == "/opt/vllm" and host.bin_dir is None
    raw["pairs"][pair]["hosts"]["b"]["bin_dri"] = "/opt/llama"
    with pytest.raises(ConfigError) as refused:
        configuration.parsed(raw)
    assert refused.value.key == f"pairs.{pair}.hosts.b.bin_dri"


def test_the_schema_carries_the_built_in_backends_keys_and_their_defaults():
    schema = reference.json_schema()
    model, host = schema["definitions"]["Model"], schema["definitions"]["HostSpec"]
    assert {"layers_on_b", "server_args", "worker_args", "workers", "vllm"} <= set(
        model["properties"])
    assert model["then"] == {"required": ["layers_on_b"]}
    assert {"bin_dir", "vllm_venv"} <= set(host["properties"])
    # vLLM's schema defaults are still written into a config by Snakemake's validate()
    raw = tiny_config()
    raw["models"]["tp"] = {"backend": "vllm", "synthetic": raw["models"]["tiny"]["synthetic"],
                           "vllm": {"tensor_parallel": 2}}
    validate(raw, str(configuration.SCHEMA))
    assert raw["models"]["tp"]["vllm"]["dtype"] == "bfloat16"
    assert [title for title, _ in owned.sections_of()] == [
        "models.<model> (backend llamacpp)", "pairs.<pair>.hosts.a / .b (backend llamacpp)",
        "models.<model>.vllm", "pairs.<pair>.hosts.a / .b (backend vllm)"]


@pytest.mark.parametrize("path", [*(ROOT / "splitbench/backends").glob("*/section.py"),
                                  ONETRIP / "section.py"], ids=lambda p: p.parent.name)
def test_a_backends_section_imports_only_what_keys_are_made_of(path):
    """The config reads a backend's keys without its code: its section.py imports the
    config's key helpers and nothing else of splitbench."""
    imported = {node.module for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ImportFrom) and node.module}
    assert {m for m in imported if m.startswith("splitbench")} == {
        "splitbench.configuration.keys"}
