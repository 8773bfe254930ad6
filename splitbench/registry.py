"""Which backends a run can use: the two built in, and any registered from outside the
package by naming its folder in SPLITBENCH_BACKENDS (folders separated by ':').

A registered backend is one folder: its name is the backend's name (what a model's
`backend:` key says), and its `backend.py` defines `BACKEND`, an instance of a
`splitbench.backends.base.Backend` subclass. Nothing else of splitbench changes to add
one. This module only reads names from the filesystem (the config checks ask it, and
they import no backend); `splitbench.backends.get` imports the folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from splitbench.errors import SplitbenchError

BUILT_IN = ("llamacpp", "vllm")
# The backend of a model that names none, and of results written before a cell or a
# launch recorded its backend.
DEFAULT = "llamacpp"
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
