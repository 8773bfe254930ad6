"""config/schema.yaml and config/README.md, generated from the typed config."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml

from splitbench.configuration import owned
from splitbench.configuration.keys import Section
from splitbench.configuration.sections import (
    REFERENCE,
    ROOT,
    SCHEMA,
    CellSpec,
    Config,
    Drift,
    HostSpec,
    Interference,
    LinkCheck,
    LinkSpec,
    Model,
    Pair,
    Paired,
    Report,
    Roundtrips,
    Source,
    Synthetic,
    Toolchain,
)

# ---------------------------------------------------------------- config/schema.yaml


HEADER = """\
# Generated from splitbench/configuration/sections.py: edit the model there, then run
#   python -m splitbench.configuration
# Defaults here are the ones Snakemake's validate() writes into the config (and so into
# the jobs' params); pairs, links, hosts and the optional sections take theirs in code.
"""


def json_schema() -> dict[str, Any]:
    """The JSON schema Snakemake validates config/config.yaml against."""
    raw = Config.model_json_schema(ref_template="#/definitions/{model}")
    found = raw.pop("$defs", {})
    owned.schema_of(found)
    definitions = {name: _tidy(body) for name, body in found.items()}
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **_tidy(raw)}
    schema["definitions"] = definitions
    return schema


def _tidy(node: Any) -> Any:
    """pydantic's schema as the validator needs it: no titles; null only where a key
    takes it; a default only where validate() should write it; named maps check their
    names (propertyNames) and refuse others."""
    if isinstance(node, list):
        return [_tidy(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    node.pop("title", None)
    applied = node.pop("x-applied", None)
    nullable = node.pop("x-nullable", False)
    if "anyOf" in node and {"type": "null"} in node["anyOf"]:
        kinds = [k for k in node.pop("anyOf") if k != {"type": "null"}]
        node = {**kinds[0], **node} if len(kinds) == 1 else {"anyOf": kinds, **node}
        if nullable:
            node["type"] = [node["type"], "null"] if "type" in node else node.get("type")
    if applied != "schema":
        node.pop("default", None)
    if "description" in node:
        node["description"] = " ".join(node["description"].split())
        if not node["description"]:
            del node["description"]
    if "patternProperties" in node:
        (pattern, value), = node.pop("patternProperties").items()
        node["propertyNames"] = {"pattern": pattern}
        node["additionalProperties"] = value
    return {k: _tidy(v) for k, v in node.items()}


# ---------------------------------------------------------------- config/README.md


def reference() -> str:
    """config/README.md: every key, its type, default and meaning, section by section."""
    out = ["# Configuration reference", "",
           "Generated from `splitbench/configuration/sections.py` "
           "(`python -m splitbench.configuration`);",
           "`config/schema.yaml` is generated from the same model. How to run your own config:",
           "`docs/configuration.md`.", "",
           "Defaults marked *schema* are written into the config by Snakemake's validate()",
           "(and so into the jobs' params); *code* ones are applied where the setting is used.",
           ""]
    for title, model in _sections():
        out += [f"## {title}", ""]
        if model.__doc__ and model is not Config:
            out += [" ".join(model.__doc__.split()), ""]
        out += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            meaning = " ".join((field.description or "").split()) + _limits(field)
            out.append(f"| `{name}` | {_type(field.annotation)} | {_default(field)} | "
                       f"{meaning.replace('|', chr(92) + '|')} |")
        out.append("")
    return "\n".join(out)


def _sections() -> list[tuple[str, type[Section]]]:
    return [("top level", Config), ("toolchain", Toolchain), ("pairs.<pair>", Pair),
            ("pairs.<pair>.hosts.a / .b", HostSpec), ("pairs.<pair>.links.<link>", LinkSpec),
            ("models.<model>", Model), ("models.<model>.synthetic", Synthetic),
            ("models.<model>.source", Source), *owned.sections_of(),
            ("cell", CellSpec), ("cell.paired", Paired),
            ("link_check", LinkCheck), ("roundtrips", Roundtrips), ("drift", Drift),
            ("interference", Interference), ("report", Report)]


def _type(annotation: Any) -> str:
    return f"`{_type_text(annotation)}`"


def _type_text(annotation: Any) -> str:
    """A key's type as a reader says it: int, number, list of int, map of Link, ..."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type_text(args[0])
    if origin is Literal:
        return " or ".join(json.dumps(a) for a in args)
    if origin in (Union, UnionType):
        kinds = [_type_text(a) for a in args if a is not type(None)]
        return " or ".join(kinds) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"list of {_type_text(args[0])}"
    if origin is dict:
        return f"map of {_type_text(args[1])}"
    names = {int: "int", float: "number", str: "string", bool: "bool"}
    # A section is read by its kind: LinkSpec (named apart from links.link.Link) is a Link.
    name = names.get(annotation, getattr(annotation, "__name__", str(annotation)))
    return name.removesuffix("Spec")


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None and not (field.json_schema_extra or {}).get("x-nullable"):
        return "—"
    where = (field.json_schema_extra or {}).get("x-applied", "code")
    return f"`{json.dumps(value)}` ({where})"


def _limits(field: Any) -> str:
    marks = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "multiple_of": "multiple of",
             "pattern": "pattern", "min_length": "at least", "max_length": "at most"}
    found = []
    for meta in field.metadata:
        for name, mark in marks.items():
            value = getattr(meta, name, None)
            if value is not None:
                found.append(f"{mark} `{value}`")
    return f" ({', '.join(found)})" if found else ""


def generated() -> dict[Path, str]:
    schema = HEADER + yaml.safe_dump(json_schema(), sort_keys=False, width=90,
                                     allow_unicode=True)
    return {SCHEMA: schema, REFERENCE: reference()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write (or --check) config/schema.yaml "
                                                 "and config/README.md from the model")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated().items():
        if path.exists() and path.read_text() == text:
            continue
        if args.check:
            stale.append(str(path.relative_to(ROOT)))
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"out of date: {', '.join(stale)} (run python -m splitbench.configuration)",
              file=sys.stderr)
        return 1
    return 0
