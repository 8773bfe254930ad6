"""Each command checks the slices it is given against their types (`splitbench.contracts.slices`)
before it does anything: a key the type does not name, a key it requires that is
missing, or a value of another type is an error that names the argument and the key's
path (`--cell: paired.rounds: expected int, got str '5'`), before any server starts.

The slices' types are the one declaration of what a job reads; the planner writes them
and the command holds what it receives to them. Standard library only, as the types
are: a cell's job runs once per cell and must not pay for pydantic.
"""

from __future__ import annotations

import argparse
import functools
import json
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

from splitbench.contracts import registry
from splitbench.errors import SplitbenchError

# The slices that carry a backend's own section under its name (`models.<m>.<backend>`,
# and the launch settings a backend plans from it), beside the keys their types name.
OPEN_TO_BACKENDS = ("ModelSlice", "ServerSettings")


class SliceError(SplitbenchError, ValueError):
    """A slice does not hold to its type; the message names the argument and the key."""


def check(value: Any, kind: Any, where: str) -> None:
    """Raise SliceError naming `where` and the key's path where `value` does not hold
    to the type `kind` (a TypedDict, or any type a TypedDict's key may have)."""
    said = problem(value, kind)
    if said:
        raise SliceError(f"{where}: {said}")


def problem(value: Any, kind: Any) -> str | None:
    """The first place where `value` does not hold to `kind`, as "key.path: what"; None
    where it holds."""
    found = _problem(value, kind, ())
    if found is None:
        return None
    path, said = found
    return f"{'.'.join(map(str, path)) + ': ' if path else ''}{said}"


def _problem(value: Any, kind: Any, path: tuple) -> tuple[tuple, str] | None:
    if kind is Any:
        return None
    if is_typeddict(kind):
        return _typed_dict_problem(value, kind, path)
    origin = get_origin(kind)
    if origin is Literal:
        allowed = get_args(kind)
        return None if value in allowed else (
            path, f"expected one of {', '.join(map(repr, allowed))}, got {_shown(value)}")
    if origin in (Union, types.UnionType):
        choices = get_args(kind)
        if any(_problem(value, choice, path) is None for choice in choices):
            return None
        return path, f"expected {_name(kind)}, got {_shown(value)}"
    if origin is list:
        if not isinstance(value, list):
            return path, f"expected a list, got {_shown(value)}"
        (item,) = get_args(kind)
        return next(filter(None, (_problem(each, item, (*path, index))
                                  for index, each in enumerate(value))), None)
    if origin is dict:
        if not isinstance(value, dict):
            return path, f"expected a mapping, got {_shown(value)}"
        key_kind, item = get_args(kind)
        for key, each in value.items():
            found = _problem(key, key_kind, (*path, key)) or _problem(each, item, (*path, key))
            if found:
                return found
        return None
    return None if _is(value, kind) else (path, f"expected {_name(kind)}, got {_shown(value)}")


def _typed_dict_problem(value: Any, kind: Any, path: tuple) -> tuple[tuple, str] | None:
    if not isinstance(value, dict):
        return path, f"expected a mapping ({kind.__name__}), got {_shown(value)}"
    hints = _hints(kind)
    unknown = sorted(key for key in set(value) - set(hints)
                     if not (kind.__name__ in OPEN_TO_BACKENDS and _a_section(key, value[key])))
    if unknown:
        return (*path, unknown[0]), f"not a key of {kind.__name__} ({', '.join(sorted(hints))})"
    missing = sorted(kind.__required_keys__ - set(value))
    if missing:
        return (*path, missing[0]), f"required in {kind.__name__}, and missing"
    return next(filter(None, (_problem(each, hints[key], (*path, key))
                              for key, each in value.items() if key in hints)), None)


def _a_section(key: str, value: Any) -> bool:
    """A backend's own section: a mapping under the backend's name (what it holds is
    the backend's to read)."""
    return isinstance(value, dict) and key in registry.names()


@functools.cache
def _hints(kind: Any) -> dict[str, Any]:
    return get_type_hints(kind)


def _is(value: Any, kind: Any) -> bool:
    if kind is type(None):
        return value is None
    if kind is float:  # JSON writes 2.0 as 2
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _name(kind: Any) -> str:
    if get_origin(kind) in (Union, types.UnionType):
        return " or ".join(_name(choice) for choice in get_args(kind))
    return "null" if kind is type(None) else getattr(kind, "__name__", str(kind))


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def typed(kind: Any) -> typing.Callable[[str], Any]:
    """An argparse type: a JSON value checked against `kind`; argparse's error names the
    flag, this one the type and the key."""

    def parse(text: str) -> Any:
        value = json.loads(text)
        try:
            check(value, kind, getattr(kind, "__name__", None) or str(kind))
        except SliceError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return value

    parse.__name__ = kind.__name__ if hasattr(kind, "__name__") else "slice"
    return parse
