"""What jobs write for later jobs to read: the model's description, each pair's
toolchain and each block's launch, as the typed dicts their JSON files hold.

They stay dicts (they are read back from JSON, and a record written by an earlier
version must still read); these types name every key one may hold.
`tests/workflow/test_workflow.py` holds a real run's records to them, key by key.
Standard library only: a cell's job reads them.
"""

from __future__ import annotations

from typing import Any, TypedDict

from splitbench.contracts.slices import ServerSettings


class ModelInfo(TypedDict, total=False):
    """`results/models/<model>.json` (`backends.describe_model`): which file the launches load,
    how it is identified, and what it is (the GGUF's header; a vLLM model's
    config.json)."""

    path: str
    sha256: str
    synthetic: bool
    source: dict[str, Any]
    backend: str
    gguf: dict[str, Any]
    hf: dict[str, Any]
    header: dict[str, Any]  # a model in a format of its backend's own: what it read


class VllmInstall(TypedDict):
    venv: str
    executable: str
    version: str


# One host's build (llama.cpp's keys are the programs' names, hence the call syntax).
HostBuild = TypedDict("HostBuild", {
    "host": str,
    "bin_dir": str,
    "carried_from": str,  # host B with no build of its own: A's bin_dir (worker_copy.py)
    "llama-server_sha256": str,
    "ggml-rpc-server_sha256": str,
    "llama_server_version": str,
    "package": str | None,
    "build_id": str,
    "vllm": VllmInstall,
}, total=False)


class ToolchainRecord(TypedDict, total=False):
    """`results/toolchain/<pair>.json` (llama.cpp's) or `<pair>.vllm.json`: each
    host's build, or why the pair's hosts cannot run it (status "failed")."""

    backend: str  # whose toolchain (absent: the default backend's, registry.DEFAULT)
    pair: str
    source: str
    status: str
    error: str
    readiness: list[str]
    a: HostBuild
    b: HostBuild


class LaunchRecord(TypedDict, total=False):
    """`results/servers/<pair>/<link>/<model>.json` and the running launch's state: its
    processes, commands, settings and identity, what loading showed (llama.cpp: where
    the layers went, memory, sensors; vLLM: its connections over the link), or why it
    failed (status "failed", error, failed_at)."""

    backend: str
    status: str
    error: str
    failed_at: float
    launch_id: str
    fingerprint: str | None
    url: str
    pair: str
    link: str
    netns_a: str | None
    proc_keys: list[str]
    worker_ports: list[int]
    commands: dict[str, Any]
    environment: dict[str, dict[str, str]]
    settings: ServerSettings
    started_at: float
    load_s: float
    load_bytes: dict[str, int] | None  # what crossed the link while it loaded
    tensor_cache: dict[str, Any]  # B's tensor cache (tensor_cache.TensorCache)
    placement: dict[str, Any]
    memory: dict[str, dict[str, float | None]]
    sensors_after_load: dict[str, Any]
    cleanup: list[dict[str, Any]]
    parallel: str
    link_connections: int
    toolchain: ToolchainRecord
