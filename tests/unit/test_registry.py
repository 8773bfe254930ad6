"""Which backends a run can use: the built-in ones and the folders SPLITBENCH_BACKENDS
names (splitbench.contracts.registry), and `backends.get` importing such a folder."""

from __future__ import annotations

import pytest

from splitbench import backends
from splitbench.contracts import registry
from tests.conftest import ROOT


def test_a_folder_named_in_the_variable_is_a_backend_by_its_folders_name(monkeypatch):
    monkeypatch.setenv(registry.VARIABLE, str(ROOT / "tests/backends/onetrip"))
    assert registry.names() == ["llamacpp", "vllm", "onetrip"]
    backend = backends.get("onetrip")
    assert backend.name == "onetrip"
    assert backends.split({"backend": "onetrip"}) == "one round trip a token"
    # The built-in ones are found as before; their splits as before.
    assert backends.split({}) == "rpc"
    assert backends.split({"backend": "vllm", "tensor_parallel": 2}) == "tp2"


def test_nothing_registered_is_the_built_in_two(monkeypatch):
    monkeypatch.delenv(registry.VARIABLE, raising=False)
    assert registry.names() == ["llamacpp", "vllm"]
    with pytest.raises(ValueError, match="no backend 'onetrip'.*SPLITBENCH_BACKENDS"):
        backends.get("onetrip")


@pytest.mark.parametrize(("name", "with_file", "message"), [
    ("mine", False, "has no backend.py"),
    ("Mine-2", True, "lower-case letters"),
    ("vllm", True, "not llamacpp, vllm"),
])
def test_a_folder_that_is_not_a_backend_is_named(tmp_path, monkeypatch, name, with_file,
                                                 message):
    folder = tmp_path / name
    folder.mkdir()
    if with_file:
        (folder / "backend.py").write_text("BACKEND = None\n")
    monkeypatch.setenv(registry.VARIABLE, str(folder))
    with pytest.raises(registry.RegistryError, match=message) as error:
        registry.names()
    assert str(folder) in str(error.value)
