"""splitbench: what does the link between two machines cost a split LLM?"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    # The version is read from git tags (splitbench.version): asked for, not at import,
    # so that a command that does not say it does not start git.
    if name == "__version__":
        from splitbench.version import number

        return number()
    raise AttributeError(f"module 'splitbench' has no attribute {name!r}")
