"""What every config section is made of: `Section` (typed, keeping the mapping it was
read from), `key` and `required` (a key's default, meaning and limits), `defaults`, and
`ConfigError`. A backend's own section (its `section.py`) is made of these too."""

from __future__ import annotations

import copy
import functools
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from splitbench.errors import SplitbenchError


class ConfigError(SplitbenchError, ValueError):
    """A configuration problem, named by its key."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config key '{key}': {problem}")
        self.key = key
        self.problem = problem


def key(default: Any = None, description: str = "", *, applied: str = "code",
        nullable: bool = False, **limits: Any) -> Any:
    """A config key: its default, where that default is applied (`schema` or `code`),
    whether null is a value (`nullable`: "no limit", say), its meaning and its limits."""
    extra = {"x-applied": applied, "x-nullable": nullable}
    if "format" in limits:
        extra["format"] = limits.pop("format")
    if "unique" in limits:
        extra["uniqueItems"] = limits.pop("unique")
    if isinstance(default, dict):
        # A section's default ({}) is read as that section, with its own defaults.
        limits["validate_default"] = True
    return Field(default, description=description, json_schema_extra=extra, **limits)


def required(description: str = "", **limits: Any) -> Any:
    extra = {}
    if "unique" in limits:
        extra["uniqueItems"] = limits.pop("unique")
    return Field(..., description=description, json_schema_extra=extra or None, **limits)


class Section(BaseModel):
    """A config section, typed, that also keeps the mapping it was read from: a job's
    slice is that mapping (`given()`), exactly as written, so its params (the job's
    rerun trigger) do not change when the model would write a value another way (a
    rate of `1` as `1.0`)."""

    model_config = ConfigDict(extra="forbid")
    _given: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_given(cls, data: Any, handler: Any) -> Any:
        section = handler(data)
        if isinstance(data, dict):
            section._given = copy.deepcopy(data)
        return section

    def given(self) -> dict[str, Any]:
        """The keys the config sets in this section, as written (a fresh copy)."""
        return copy.deepcopy(self._given)


def defaults(section: type[Section], exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every optional key of a section with its default (None where it has none): a
    fresh dict, its values fresh copies, so a caller may change what it gets."""
    return copy.deepcopy(_defaults(section, exclude))


@functools.cache
def _defaults(section: type[Section], exclude: tuple[str, ...]) -> dict[str, Any]:
    # Planning asks once per job (15,000 times for 5,000 cells): read the model once.
    return {name: field.get_default(call_default_factory=True)
            for name, field in section.model_fields.items()
            if not field.is_required() and name not in exclude}
