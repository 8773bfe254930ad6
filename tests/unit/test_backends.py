"""The backend seam: the cells find a backend by name and use only what it declares."""

from __future__ import annotations

import dataclasses

import pytest

from splitbench import backends


@pytest.mark.parametrize("name", ["llamacpp", "vllm"])
def test_each_backend_declares_everything_a_cell_uses(name):
    backend = backends.get(name)
    assert backend.name == name
    for field in dataclasses.fields(backends.Backend):
        value = getattr(backend, field.name)
        assert value is not None, field.name
        if field.name not in ("name", "launch_errors"):
            assert callable(value), field.name
    assert all(issubclass(e, Exception) for e in backend.launch_errors)


def test_an_unknown_backend_is_refused_by_name():
    with pytest.raises(ValueError, match="no backend 'tgi'"):
        backends.get("tgi")


def test_a_cell_takes_its_models_backend_and_reaches_it_only_through_the_seam():
    from splitbench.cells import delay_sweep, measure

    assert measure.backend_of({"model": {}}) is backends.get("llamacpp")
    assert measure.backend_of({"model": {"backend": "vllm"}}) is backends.get("vllm")
    assert delay_sweep.BACKEND is backends.get("llamacpp")  # llama.cpp's round trips
    for module in (measure, delay_sweep):
        assert not hasattr(module, "servers") and not hasattr(module, "prompts")
