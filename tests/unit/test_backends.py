"""The backend seam: the cells find a backend by name and use only what it declares."""

from __future__ import annotations

import dataclasses

import pytest

from splitbench import backends


def test_the_llamacpp_backend_declares_everything_a_cell_uses():
    backend = backends.get("llamacpp")
    assert backend.name == "llamacpp"
    for field in dataclasses.fields(backends.Backend):
        value = getattr(backend, field.name)
        assert value is not None, field.name
        if field.name not in ("name", "launch_errors"):
            assert callable(value), field.name
    assert all(issubclass(e, Exception) for e in backend.launch_errors)


def test_an_unknown_backend_is_refused_by_name():
    with pytest.raises(ValueError, match="no backend 'vllm'"):
        backends.get("vllm")


def test_the_cells_reach_llamacpp_only_through_the_seam():
    from splitbench.cells import delay_sweep, measure

    assert measure.BACKEND is delay_sweep.BACKEND is backends.get("llamacpp")
    for module in (measure, delay_sweep):
        assert not hasattr(module, "servers") and not hasattr(module, "prompts")
