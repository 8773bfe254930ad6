"""The keys a backend owns in the config, declared in its folder's `section.py` (`MODEL`:
a model's keys, `HOST` where it has keys of each host) and composed here as the config
is read. The default backend's model keys sit at the model's top level
(`models.<m>.layers_on_b`: the configs written before backends had sections keep their
keys), every other backend's under its name (`models.<m>.vllm:`); a backend's host keys
sit at the host's top level (`pairs.<p>.hosts.b.vllm_venv`). The schema and the
reference carry the built-in backends' keys (`schema_of`, `sections_of`)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from pydantic import BaseModel, ValidationError

from splitbench.configuration.keys import ConfigError, Section, defaults
from splitbench.contracts import registry


class KeyProblem(ConfigError):
    """A problem with a key under the section being read: the config's reader prefixes
    the section's path (`models.toy` + `vllm.dtype`)."""


def section(name: str) -> ModuleType | None:
    """Backend `name`'s section module, or None where it has none (or no such backend:
    the model's `backend` check says so)."""
    if name not in registry.names():
        return None
    return registry.module(name, "section")


def model_section(name: str) -> type[Section] | None:
    found = section(name)
    return getattr(found, "MODEL", None) if found else None


def sweeps_round_trips(name: str) -> bool:
    """Whether backend `name`'s round trips per token are what the delay sweep counts
    (its section's SWEEPS_ROUND_TRIPS: llama.cpp's RPC workers)."""
    return bool(getattr(section(name), "SWEEPS_ROUND_TRIPS", False))


def host_sections() -> dict[str, type[Section]]:
    """Every backend's host keys: backend name -> its section."""
    found = {name: getattr(section(name), "HOST", None) for name in registry.names()}
    return {name: kind for name, kind in found.items() if kind is not None}


def read_model(model: Section) -> None:
    """Read the backend's keys of a model: the default backend's from the model's top
    level, the model's own backend's from under its name; refuse a key of another
    backend, or one no backend owns. Each is then an attribute of the model (the
    default backend's on every model, their defaults where not given)."""
    extra, backend = model.__pydantic_extra__, getattr(model, "backend", registry.DEFAULT)
    if extra is None or backend not in registry.names():
        return
    flat_kind = model_section(registry.DEFAULT)
    flat_keys = set(flat_kind.model_fields) if flat_kind else set()
    flat = {k: extra.pop(k) for k in list(extra) if k in flat_keys}
    if flat and backend != registry.DEFAULT:
        raise KeyProblem(next(iter(flat)), f"a key of backend {registry.DEFAULT}; this "
                                           f"model's backend is {backend}")
    if flat_kind and backend == registry.DEFAULT:
        read = validated(flat_kind, flat, "")
        extra.update({k: getattr(read, k) for k in flat_keys})
    elif flat_kind:  # the default's keys are attributes of every model (`workers`: 1)
        extra.update({**dict.fromkeys(flat_keys), **defaults(flat_kind)})
    for key in [k for k in extra if k not in flat_keys]:
        if key not in registry.names():
            raise KeyProblem(key, "not a key of a model (its own keys, the default "
                                  "backend's, or a backend's section under its name)")
        if key != backend:
            raise KeyProblem(key, f"backend {key}'s section: set backend: {key} to use it")
        kind = model_section(key)
        if kind is None:
            raise KeyProblem(key, f"backend {key} has no keys of its own")
        extra[key] = validated(kind, extra[key], key)


def read_host(host: Section) -> None:
    """Read the backends' keys of a host (each backend's `HOST`); every one is then an
    attribute of the host (its default where not given)."""
    extra = host.__pydantic_extra__
    if extra is None:
        return
    kinds = host_sections()
    owner = {key: name for name, kind in kinds.items() for key in kind.model_fields}
    if unknown := [k for k in extra if k not in owner]:
        raise KeyProblem(unknown[0], "not a key of a host")
    for name, kind in kinds.items():
        given = {k: v for k, v in extra.items() if owner[k] == name}
        read = validated(kind, given, "")
        extra.update({k: getattr(read, k) for k in kind.model_fields})


def validated(kind: type[Section], value: Any, where: str) -> Section:
    """`value` read as `kind`, or a KeyProblem naming the key under `where`."""
    try:
        return kind.model_validate(value)
    except ValidationError as error:
        first = error.errors()[0]
        path = ".".join(str(p) for p in (where, *first["loc"]) if p != "")
        raise KeyProblem(path or where, first["msg"]) from None


# ---------------------------------------------------------------- schema and reference

def schema_of(definitions: dict[str, Any]) -> None:
    """Add the built-in backends' keys to the schema's `Model` and `HostSpec`: the
    default backend's model keys (required where the model's backend is the default),
    each other backend's section under its name, every host key. A key no built-in
    backend declares is left to the config's reader: a model's must be a mapping (a
    registered backend's section)."""
    model, host = definitions["Model"], definitions["HostSpec"]
    for name in registry.BUILT_IN:
        kind = model_section(name)
        if kind is not None:
            body = _schema(kind, definitions)
            if name == registry.DEFAULT:
                model["properties"].update(body["properties"])
                model["if"] = {"properties": {"backend": {"const": name}}}
                model["then"] = {"required": body.get("required", [])}
            else:
                definitions[kind.__name__] = body
                model["properties"][name] = {
                    "$ref": f"#/definitions/{kind.__name__}",
                    "description": (kind.__doc__ or "").split("\n\n")[0]}
        host_kind = getattr(section(name), "HOST", None)
        if host_kind is not None:
            host["properties"].update(_schema(host_kind, definitions)["properties"])
    model["additionalProperties"] = {"type": "object"}


def _schema(kind: type[BaseModel], definitions: dict[str, Any]) -> dict[str, Any]:
    body = kind.model_json_schema(ref_template="#/definitions/{model}")
    definitions.update(body.pop("$defs", {}))
    return body


def sections_of() -> list[tuple[str, type[Section]]]:
    """The reference's sections of the built-in backends' keys, titled by where they sit."""
    out = []
    for name in registry.BUILT_IN:
        kind = model_section(name)
        if kind is not None:
            out.append((f"models.<model> (backend {name})" if name == registry.DEFAULT
                        else f"models.<model>.{name}", kind))
        host_kind = getattr(section(name), "HOST", None)
        if host_kind is not None:
            out.append((f"pairs.<pair>.hosts.a / .b (backend {name})", host_kind))
    return out
