"""Where vLLM is installed, and whether a config's vLLM models can run here: read when
the workflow plans (so: no imports beyond the standard library)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from splitbench.configuration import Config

INSTALL = "./bootstrap.sh vllm"
# Where ./bootstrap.sh vllm puts it, relative to the workflow's directory.
DEFAULT_VENV = ".venv-vllm"


def executable(venv: str) -> Path:
    """The `vllm` command of an environment (a relative one: under this directory)."""
    return Path(venv).expanduser().absolute() / "bin" / "vllm"


def missing(config: Config) -> str | None:
    """Why a config's vLLM models cannot run on this machine (None when they can, or
    when it has none): an embedded pair's hosts use the workflow's own environment,
    which must hold vLLM. Checked when the workflow plans, before anything starts."""
    from splitbench import pairs  # the config's modules: only where a config is asked

    wanted = [name for name, spec in config.models.items() if spec.backend == "vllm"]
    embedded = [pair for pair, spec in config.pairs.items()
                if pairs.of(spec.mode).on_this_machine]
    if not wanted or not embedded:
        return None
    venvs = {getattr(config.pairs[p].hosts, side).vllm_venv or DEFAULT_VENV
             for p in embedded for side in ("a", "b")}
    absent = sorted(v for v in venvs if not executable(v).exists())
    if not absent:
        return None
    return (f"model(s) {', '.join(wanted)} use backend vllm, and {', '.join(absent)} has no "
            f"vLLM (no {executable(absent[0])}): install it with `{INSTALL}`")
