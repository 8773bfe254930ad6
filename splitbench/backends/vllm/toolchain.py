"""Which vLLM each host of a pair runs, for its models with backend vllm: its own record
(results/toolchain/{pair}.vllm.json) beside llama.cpp's, so that adding a vLLM model
re-runs nothing of the llama.cpp blocks. A host without a working vLLM is a result:
the record says failed and why, and the pair's vLLM blocks are not launched."""

from __future__ import annotations

import json
from pathlib import Path

from splitbench.backends.vllm.setup import INSTALL, executable
from splitbench.contracts.records import ToolchainRecord, VllmInstall
from splitbench.contracts.slices import HostsSlice
from splitbench.errors import SplitbenchError
from splitbench.infra.hosts import Host, HostError, host_from_spec
from splitbench.infra.ssh_errors import SSHError


class VllmMissing(SplitbenchError):
    """A host has no usable vLLM; the message says which and how to install it."""


# Reads the installed distribution's version without importing vLLM: `vllm --version`
# imports torch and vLLM, which takes many seconds a host. A command that is there but cannot
# start still fails its block's launch, which says why.
VERSION_SCRIPT = ("import importlib.metadata as m, os, sys; "
                  "os.access(sys.argv[1], os.X_OK) or sys.exit('no ' + sys.argv[1]); "
                  "print(m.version('vllm'))")


def describe(host: Host, venv: str, where: str) -> VllmInstall:
    """The host's vLLM: its `vllm` command and the version of the vllm distribution
    installed beside it."""
    command = str(executable(venv)) if not host.remote else f"{venv}/bin/vllm"
    python = str(Path(command).parent / "python")
    try:
        found = host.run([python, "-c", VERSION_SCRIPT, command], check=False, timeout=60)
        lines = found.stdout.strip().splitlines()
        problem = "" if found.returncode == 0 and lines else (
            (found.stderr or found.stdout).strip()[-300:] or f"exit {found.returncode}")
    except HostError as exc:  # no python there at all
        problem = str(exc)
    if problem:
        raise VllmMissing(f"{where}: host {host.name} has no working vLLM at {command} "
                          f"({problem}): install it with `{INSTALL}` (or set the host's "
                          "vllm_venv)")
    return {"venv": venv, "executable": command, "version": lines[-1]}


def record(pair: str, hosts_spec: HostsSlice, default_venv: str,
           out: str | Path) -> ToolchainRecord:
    """Describe both hosts' vLLM, refuse two versions, write the record: status "ok", or
    "failed" with the reason."""
    where = f"pair '{pair}'"
    try:
        ends = {side: {"vllm": describe(host_from_spec(side, hosts_spec[side]),
                                        hosts_spec[side].get("vllm_venv") or default_venv,
                                        where)}
                for side in ("a", "b")}
        if ends["a"]["vllm"]["version"] != ends["b"]["vllm"]["version"]:
            raise VllmMissing(f"{where}: the hosts run different vLLM versions (A: "
                              f"{ends['a']['vllm']['version']}, B: "
                              f"{ends['b']['vllm']['version']}): the ranks need one")
        data = {"pair": pair, "backend": "vllm", "status": "ok", **ends}
    except (VllmMissing, HostError, SSHError) as exc:
        data = {"pair": pair, "backend": "vllm", "status": "failed",
                "error": f"{type(exc).__name__}: {exc}", "a": {}, "b": {}}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(data, indent=1))
    return data
