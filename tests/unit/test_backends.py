"""The backend seam: the cells find a backend by name and use only what it declares."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import typing
from pathlib import Path

import pytest

from splitbench import backends
from splitbench.backends.base import Backend, Launch, ModuleBackend
from splitbench.contracts import registry

ROOT = Path(__file__).resolve().parents[2]
CELLS = ROOT / "splitbench/cells"
# Every backend a run can name: the two built in and the example a user registers.
REGISTERED = ["llamacpp", "vllm", "onetrip"]


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setenv(registry.VARIABLE, str(ROOT / "tests/backends/onetrip"))
    return backends.get


def seam() -> dict[str, typing.Any]:
    """What a cell may ask of a backend: Backend's public methods, abstract or not."""
    return {name: member for name, member in vars(Backend).items()
            if callable(member) and not name.startswith("_")}


def asked_by_the_cells() -> set[str]:
    """Every attribute the cells' modules read off a backend (`backend.x`, `BACKEND.x`,
    `backend_of(cell).x`)."""
    asked = set()
    for path in CELLS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            owner = node.value
            if isinstance(owner, ast.Call):
                owner = owner.func
            if isinstance(owner, ast.Name) and owner.id in ("backend", "BACKEND",
                                                            "backend_of"):
                asked.add(node.attr)
    return asked


def delegations() -> dict[str, tuple[str, str, int, tuple[str, ...]]]:
    """ModuleBackend's methods, read from its source, each as the call it hands on:
    method -> (module attribute, function, positional arguments, keyword names)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(ModuleBackend)))
    found = {}
    for method in ast.walk(tree):
        if not isinstance(method, ast.FunctionDef):
            continue
        for node in ast.walk(method):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Attribute)
                    and isinstance(node.func.value.value, ast.Name)
                    and node.func.value.value.id == "self"):
                found[method.name] = (node.func.value.attr, node.func.attr, len(node.args),
                                      tuple(k.arg for k in node.keywords))
    return found


def accepts_every_call_of(implementation, declared) -> str | None:
    """Why `implementation` cannot take a call that `declared`'s signature allows (all
    arguments by position, all by name, only the required ones), or None."""
    wanted = inspect.signature(declared)
    given = inspect.signature(implementation)
    params = list(wanted.parameters.values())
    required = [p for p in params if p.default is inspect.Parameter.empty]
    named = {p.name: None for p in params[1:]
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    for shape, args, kwargs in (("by position", [None] * len(params), {}),
                                ("by name", [None], named),
                                ("required only", [None] * len(required), {})):
        try:
            given.bind(*args, **kwargs)
        except TypeError as exc:
            return f"{shape}: {exc} (declared {wanted}, given {given})"
    return None


def test_the_seam_covers_everything_the_cells_ask_of_a_backend():
    asked = asked_by_the_cells()
    assert {"ensure", "stream", "request_row"} <= asked  # the scan reads the cells
    attributes = set(vars(Backend).get("__annotations__", {}))  # name, launch_errors
    assert asked <= set(seam()) | attributes, asked - set(seam()) - attributes


@pytest.mark.parametrize("name", REGISTERED)
def test_each_backend_takes_every_call_the_seam_allows(name, registered):
    backend = registered(name)
    assert backend.name == name
    assert all(issubclass(e, Exception) for e in backend.launch_errors)
    for method, declared in seam().items():
        implementation = getattr(type(backend), method)
        assert not getattr(implementation, "__isabstractmethod__", False), method
        why = accepts_every_call_of(implementation, declared)
        assert why is None, f"{name}.{method}: {why}"


@pytest.mark.parametrize("name", REGISTERED)
def test_what_a_module_backend_hands_on_exists_in_its_modules(name, registered):
    """ModuleBackend answers each abstract method by calling a function of one of the
    backend's modules: that function must be there and take the arguments passed."""
    handed_on = delegations()
    assert set(handed_on) == Backend.__abstractmethods__
    backend = registered(name)
    assert isinstance(backend, ModuleBackend)
    for method, (module, function, positional, keywords) in handed_on.items():
        if method in vars(type(backend)):
            continue  # its own method: the seam's signature check holds it
        target = getattr(getattr(backend, module), function, None)
        assert callable(target), f"{name}: {module}.{function} is missing ({method})"
        try:
            inspect.signature(target).bind(*[None] * positional, **dict.fromkeys(keywords))
        except TypeError as exc:
            pytest.fail(f"{name}: {module}.{function} cannot take what {method} passes: "
                        f"{exc}")


@pytest.mark.parametrize("name", REGISTERED)
def test_what_ensure_returns_is_a_launch(name, registered):
    """The object `ensure` is declared to return has every member of the Launch
    protocol the cells read: its fields, and `alive` as a method taking nothing."""
    backend = registered(name)
    module, function, _, _ = delegations()["ensure"]
    target = getattr(getattr(backend, module), function)
    returned = typing.get_type_hints(target)["return"]
    fields = {field.name for field in dataclasses.fields(returned)}
    assert set(Launch.__annotations__) <= fields, set(Launch.__annotations__) - fields
    methods = [m for m, member in vars(Launch).items()
               if callable(member) and not m.startswith("_")]
    assert methods == ["alive"]
    for method in methods:
        why = accepts_every_call_of(getattr(returned, method), getattr(Launch, method))
        assert why is None, f"{name}: {returned.__name__}.{method}: {why}"


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
    # The sweep's backend is its server settings' (a backend whose section has a sweep).
    assert roundtrips.backend_of({"server": {}}) is backends.get("llamacpp")
    assert roundtrips.backend_of({"server": {"backend": "vllm"}}) is backends.get("vllm")
    for module in (measure, roundtrips):
        assert not hasattr(module, "servers") and not hasattr(module, "prompts")


def test_each_backend_names_its_own_splits_format_and_toolchain(registered):
    assert backends.split_labels() == {"rpc": "llama.cpp RPC", "tp2": "vLLM TP=2",
                                       "pp2": "vLLM PP=2"}  # onetrip names none
    assert backends.default_split() == "rpc"
    assert backends.label("vllm") == "vLLM" and backends.label("onetrip") == "backend onetrip"
    assert backends.layout_of({"backend": "vllm", "split": "pp2"}) == \
        "vLLM PP=2: half the layers"
    assert backends.layout_of({"backend": "onetrip", "split": "one-trip"}) == \
        "backend onetrip: one-trip"
    assert backends.layout_of({"blocks_on_b": 2, "output_on_b": True}) == \
        "2 blocks + output layer"  # llama.cpp's, the default backend's
    assert [registered(name).model_format for name in REGISTERED] == ["gguf", "hf",
                                                                      "onetrip"]
    assert [registered(name).own_toolchain for name in REGISTERED] == [False, True, True]


def test_a_toolchain_record_is_shown_in_its_backends_words(registered):
    record = {"pair": "p", "status": "ok",
              "a": {"llama_server_version": "b1", "llama-server_sha256": "f" * 64},
              "b": {"carried_from": "a"}}
    rows = registered("llamacpp").toolchain_rows(record)
    assert [row["host"] for row in rows] == ["A", "B"]
    assert rows[0]["llama-server version"] == "b1"
    assert rows[0]["llama-server sha256"] == "f" * 16
    # the default: every plain value a host's record holds, under its own key
    plain = registered("onetrip").toolchain_rows({"pair": "p", "a": {"script": "x.py",
                                                                     "nested": {}}})
    assert plain[0] == {"pair": "p", "host": "A", "status": "ok", "error": None,
                        "script": "x.py"}


def test_a_token_pool_too_small_for_prompts_is_refused_naming_the_server():
    from splitbench.backends import prompts

    assert prompts.checked_pool(list(range(prompts.NONCE_TOKENS)), "u") == list(
        range(prompts.NONCE_TOKENS))
    with pytest.raises(RuntimeError, match=r"^the server at http://a:1 gave only 2 token"):
        prompts.checked_pool([1, 2, "x"], "http://a:1")


def test_llama_cpp_puts_each_request_of_a_release_on_the_slot_of_its_place():
    from splitbench.backends.llamacpp import api as llamacpp_api
    from splitbench.backends.vllm import api as vllm_api

    bodies = [llamacpp_api.API.request([5, 6], 8, place) for place in range(3)]
    assert [body["id_slot"] for body in bodies] == [0, 1, 2]
    assert bodies[2] == {**llamacpp_api.body([5, 6], 8), "id_slot": 2}
    # vLLM has no slots: its body is sent as it is.
    assert vllm_api.API.request([5, 6], 8, 1) == vllm_api.body([5, 6], 8)
