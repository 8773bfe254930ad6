"""The backend seam: the cells find a backend by name and use only what it declares."""

from __future__ import annotations

import pytest

from splitbench import backends


@pytest.mark.parametrize("name", ["llamacpp", "vllm"])
def test_each_backend_declares_everything_a_cell_uses(name):
    backend = backends.get(name)
    assert backend.name == name
    assert isinstance(backend, backends.Backend)  # an abstract method left out fails here
    assert not getattr(type(backend), "__abstractmethods__", None)
    assert all(issubclass(e, Exception) for e in backend.launch_errors)


def test_a_backend_that_leaves_a_method_out_cannot_be_made():
    class Half(backends.Backend):
        name = "half"

        def ensure(self, *args, **kwargs):
            raise NotImplementedError

    with pytest.raises(TypeError, match="abstract"):
        Half()


def test_an_unknown_backend_is_refused_by_name():
    with pytest.raises(ValueError, match="no backend 'tgi'"):
        backends.get("tgi")


def test_a_cell_takes_its_models_backend_and_reaches_it_only_through_the_seam():
    from splitbench.cells import measure, roundtrips

    assert measure.backend_of({"model": {}}) is backends.get("llamacpp")
    assert measure.backend_of({"model": {"backend": "vllm"}}) is backends.get("vllm")
    assert roundtrips.BACKEND is backends.get("llamacpp")  # llama.cpp's round trips
    for module in (measure, roundtrips):
        assert not hasattr(module, "servers") and not hasattr(module, "prompts")
