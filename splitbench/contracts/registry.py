"""Which backends a run can use: the two built in, and any registered from outside the
package by naming its folder in SPLITBENCH_BACKENDS (folders separated by ':').

A registered backend is one folder: its name is the backend's name (what a model's
`backend:` key says), and its `backend.py` defines `BACKEND`, an instance of a
`splitbench.backends.base.Backend` subclass; its `section.py`, where it has keys of its
own in the config, defines them (`splitbench.configuration.owned`). Nothing else of
splitbench changes to add one. This module finds a backend's folder and imports a
module of it by name (`module`): the config imports a backend's keys without its code,
`splitbench.backends.get` its code.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType

from splitbench.errors import SplitbenchError

BUILT_IN = ("llamacpp", "vllm")
# The backend of a model that names none, and of results written before a cell or a
# launch recorded its backend.
DEFAULT = "llamacpp"
# Its model format: the file the model stage writes for a synthetic model or fetches
# (results.MODEL_FILE); a backend of another format writes its own (`model_format`).
DEFAULT_MODEL_FORMAT = "gguf"
VARIABLE = "SPLITBENCH_BACKENDS"
# A backend's name: what a model's `backend:` says, and a Python identifier.
NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


class RegistryError(SplitbenchError):
    """A folder named in SPLITBENCH_BACKENDS is not a backend; the message says why."""


def registered() -> dict[str, Path]:
    """name -> folder of every backend registered in SPLITBENCH_BACKENDS."""
    found: dict[str, Path] = {}
    for entry in filter(None, os.environ.get(VARIABLE, "").split(os.pathsep)):
        folder = Path(entry).expanduser().resolve()
        name = folder.name
        where = f"{VARIABLE}: {folder}"
        if not (folder / "backend.py").is_file():
            raise RegistryError(f"{where} has no backend.py (a backend folder defines "
                                "BACKEND in its backend.py)")
        if not NAME.match(name) or name in BUILT_IN:
            raise RegistryError(f"{where}: a backend folder's name is its backend's name: "
                                f"lower-case letters, digits and _, not {', '.join(BUILT_IN)}")
        found[name] = folder
    return found


def names() -> list[str]:
    """Every backend a model may name: the built-in ones, then the registered ones."""
    return [*BUILT_IN, *registered()]


def module(name: str, part: str) -> ModuleType | None:
    """The module `part` of backend `name` (its folder's `<part>.py`: "backend",
    "section"), imported; None where the folder has no such file. A registered folder
    is imported as a package of its own, `splitbench_backend_<name>`, so that its modules
    import each other relatively (`from . import server`)."""
    if name in BUILT_IN:
        folder = Path(__file__).parents[1] / "backends" / name
        package = f"splitbench.backends.{name}"
    else:
        found = registered().get(name)
        if found is None:
            raise RegistryError(f"no backend '{name}' (built in: {', '.join(BUILT_IN)}; "
                                f"others are registered in {VARIABLE})")
        folder, package = found, f"splitbench_backend_{name}"
        _import_folder(package, folder)
    if not (folder / f"{part}.py").is_file():
        return None
    return importlib.import_module(f"{package}.{part}")


def _import_folder(package: str, folder: Path) -> None:
    if package in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(
        package, folder / "__init__.py", submodule_search_locations=[str(folder)])
    if spec is None or spec.loader is None:
        raise RegistryError(f"{VARIABLE}: cannot import {folder}")
    package_module = importlib.util.module_from_spec(spec)
    sys.modules[package] = package_module
    if (folder / "__init__.py").exists():
        spec.loader.exec_module(package_module)
