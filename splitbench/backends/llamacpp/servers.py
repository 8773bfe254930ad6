"""Server launch: ggml-rpc-server on host B, llama-server on host A, one set per pair.

A launch serves every cell of one (pair, link, model) block back to back. Each cell job
calls `ensure`: it reuses the running launch when its fingerprint matches and it answers
/health, and otherwise stops whatever runs on the pair and launches anew.
"""

from __future__ import annotations

import functools
import re
import time
import uuid
from pathlib import Path
from typing import TypedDict

from splitbench.backends import lifecycle
from splitbench.backends.base import toolchain_failure
from splitbench.backends.lifecycle import LaunchError
from splitbench.backends.llamacpp import tensor_cache, worker_copy
from splitbench.contracts.records import LaunchRecord, ModelInfo, ToolchainRecord
from splitbench.contracts.slices import LinkSlice, ServerSettings
from splitbench.infra import procs, sockdiag, telemetry
from splitbench.infra.hosts import Host
from splitbench.links.link import Link

HEALTH_TIMEOUT_S = 600



def ensure(
    link: Link,
    settings: ServerSettings,
    model_path: str,
    model_sha: str,
    toolchain: ToolchainRecord,
    slot: str = "",
) -> lifecycle.Server:
    """A healthy launch with exactly this fingerprint: reused, or started now.

    A pair runs one launch per `slot`: the default one serves its cells; a paired cell
    keeps the baseline link's launch in the "reference" slot beside it, on its own HTTP
    port, so that it can alternate between the two request by request."""
    wanted = lifecycle.fingerprint(link, settings, model_sha, toolchain["a"]["build_id"])
    with procs.locked(f"server-{link.pair}"):
        server = lifecycle.current(link.pair, slot)
        if server is not None and server.fingerprint == wanted and server.alive():
            with link.host_a.entered():
                if lifecycle.healthy(server.url):
                    return server
        lifecycle.stop(link.pair, slot)
        return _launch(link, settings, model_path, wanted, toolchain, slot)


def launch_record(link_spec: LinkSlice, settings: ServerSettings,
                  model: ModelInfo, toolchain: ToolchainRecord) -> LaunchRecord:
    """The launch stage: the servers of one block, launched (or reused); their record, or
    one saying why they could not be launched (`lifecycle.launch_block`)."""
    return lifecycle.launch_block(
        link_spec, settings,
        lambda link: ensure(link, settings, model["path"], model["sha256"], toolchain).record,
        reasons=[toolchain_failure(toolchain)],
        fingerprint_of=lambda link: lifecycle.fingerprint(link, settings, model["sha256"],
                                                         toolchain["a"]["build_id"]))


def _launch(
    link: Link,
    settings: ServerSettings,
    model_path: str,
    wanted: str,
    toolchain: ToolchainRecord,
    slot: str = "",
) -> lifecycle.Server:
    """Start the launch's workers and llama-server and wait until it serves. A launch
    that fails stops everything it started before the error leaves (a worker left
    behind would outlive the run: nothing else knows it belongs to a failed launch)."""
    started: list[str] = []
    cache: tensor_cache.TensorCache = {}
    try:
        return _start(link, settings, model_path, wanted, toolchain, slot, started, cache)
    except BaseException:
        for key in started:
            procs.stop(key)
        tensor_cache.discard(link.host_b, cache)  # a file it was writing is cut short
        raise


def _worker_build(link: Link, toolchain: ToolchainRecord
                  ) -> tuple[Path, dict[str, str] | None]:
    """Where B's worker is, and its environment: B's own build, or A's carried to B
    for this run (worker_copy.py)."""
    if not toolchain["b"].get("carried_from"):
        return Path(toolchain["b"]["bin_dir"]), None
    try:
        copy_dir = worker_copy.carry(link.host_b, Path(toolchain["a"]["bin_dir"]),
                                     f"pair '{link.pair}'")
    except worker_copy.WorkerCopyError as exc:
        raise LaunchError(str(exc)) from exc
    return Path(copy_dir), worker_copy.environment(copy_dir)


def _start(
    link: Link,
    settings: ServerSettings,
    model_path: str,
    wanted: str,
    toolchain: ToolchainRecord,
    slot: str,
    started: list[str],
    cache: tensor_cache.TensorCache,
) -> lifecycle.Server:
    logs = procs.state_dir() / "logs"
    launch_id = uuid.uuid4().hex[:12]
    bin_a = Path(toolchain["a"]["bin_dir"])
    bin_b, worker_env = _worker_build(link, toolchain)
    # B keeps the big tensors it is sent: a launch on the pair's next link sends hashes.
    cache.update(tensor_cache.prepare(link.host_b, bin_b / "ggml-rpc-server", worker_env,
                                      link.pair))
    worker_env = {**(worker_env or {}), **cache.get("env", {})} or None
    threads = str(settings["threads"])
    workers = settings.get("workers", 1)
    worker_ports = [link.ports.worker(i) for i in range(workers)]
    rpc_argvs, proc_keys = [], []
    for i, worker_port in enumerate(worker_ports):
        # The worker has no authentication: bind it to B's link address, never 0.0.0.0.
        argv = [str(bin_b / "ggml-rpc-server"), "-H", link.addr_b, "-p", str(worker_port),
                "-t", threads, *cache.get("flags", []), *settings.get("worker_args", [])]
        key = f"rpc-{lifecycle.named(link.pair, slot)}-{i}"
        started.append(key)
        worker = link.host_b.spawn(argv, role="rpc-server", key=key, env=worker_env,
                                   extra={"pair": link.pair, "stops": "worker"},
                                   log_path=logs / f"{launch_id}-rpc{i}.log")
        link.host_b.wait_listening(link.addr_b, worker_port, timeout=30, server=worker)
        rpc_argvs.append(argv)
        proc_keys.append(key)
    port = lifecycle.http_port(link, slot)
    server_argv = [
        str(bin_a / "llama-server"), "-m", str(Path(model_path).resolve()),
        "--rpc", ",".join(f"{link.connect_addr}:{port}" for port in worker_ports),
        "-ngl", str(settings["layers_on_b"]),
        # Several workers share B's layers evenly (one device each, chained by A).
        *(["--tensor-split", ",".join(["1"] * workers)] if workers > 1 else []),
        "--fit", "off",
        "-np", str(settings["slots"]),
        "-c", str(settings["n_ctx"]),
        "--cache-ram", "0",
        "--metrics",
        "-t", threads,
        "--host", "127.0.0.1", "--port", str(port),
        # At verbosity 4 the start-up log says where the layers went (`placement`); per
        # request it adds about twenty lines.
        "-lv", "4",
        *settings.get("server_args", []),
    ]
    llama_key = f"llama-{lifecycle.named(link.pair, slot)}"
    started.insert(0, llama_key)  # stopped first: the front end before its workers
    load_started = time.monotonic()
    llama = link.host_a.spawn(server_argv, role="llama-server", key=llama_key,
                              extra={"pair": link.pair, "stops": "front"},
                              log_path=logs / f"{launch_id}-llama-server.log")
    url = f"http://127.0.0.1:{port}"
    record: LaunchRecord = {
        "launch_id": launch_id, "fingerprint": wanted, "url": url,
        "pair": link.pair, "link": link.name, "netns_a": link.host_a.netns,
        "proc_keys": [llama_key, *proc_keys],
        "worker_ports": worker_ports,
        "commands": {"rpc_servers": rpc_argvs, "llama_server": server_argv},
        "settings": settings, "started_at": time.time(),
        "tensor_cache": {k: v for k, v in cache.items() if k != "env"},
    }
    with link.host_a.entered():
        # The workers too: one that ends while llama-server loads leaves its port to
        # whoever binds it next, and llama-server's reconnect would go there.
        watched = {"llama-server": lambda: procs.find(llama_key)} | {
            f"ggml-rpc-server {i} on host {link.host_b.name}":
            functools.partial(procs.find, key) for i, key in enumerate(proc_keys)}
        lifecycle.wait_healthy(url, watched, HEALTH_TIMEOUT_S, "llama-server",
                               meanwhile=lifecycle.listeners_checked(link,
                                                                     record["proc_keys"]))
        record["load_s"] = round(time.monotonic() - load_started, 3)
        tensor_cache.loaded(link.host_b, cache)
        record["load_bytes"] = load_bytes(link.connect_addr, worker_ports)
        record["placement"] = placement(Path(llama["log"]).read_text(errors="replace"))
        _warm_up(url)
    # Nothing of it may listen beyond the link (a result: the launch fails, and stops):
    # checked while it loaded, and once more now that it serves.
    lifecycle.refuse_open_listeners(link, record["proc_keys"])
    record["memory"] = {key: memory_mib(host, procs.find(key)["pid"]) for key, host in
                        [(llama_key, link.host_a)] + [(k, link.host_b) for k in proc_keys]}
    record["sensors_after_load"] = telemetry.snapshot(link.host_a)
    return lifecycle.save(record, link.pair, slot)


def load_bytes(addr: str, ports: list[int]) -> dict[str, int] | None:
    """What crossed the link while llama-server loaded: the kernel's byte counters of its
    connections to the workers, read once it serves (before any request), in the
    calling thread's namespace. None where there is no such connection to read.

    `a_to_b` is what B acknowledged (the weights and requests it got, each byte once);
    `a_to_b_resent` what A sent again after a loss: a receiver too busy to keep up drops
    segments, and counting their second copies would make a launch look heavier than
    its model."""
    connections = [c for port in ports for c in sockdiag.connections_to(addr, port)]
    if not connections:
        return None
    sums = sockdiag.totals(connections)
    return {"a_to_b": sums["bytes_acked"], "a_to_b_resent": sums["bytes_retrans"],
            "b_to_a": sums["bytes_received"], "connections": len(connections)}


_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_REPEATING = re.compile(r"offloading (\d+) repeating layers to GPU")
_BUFFER = re.compile(r"(\S+) (model|KV|compute) buffer size =\s+([\d.]+) MiB")


class Placement(TypedDict, total=False):
    """Where llama-server put the model (`placement`, a launch record's `placement`):
    its layers (the blocks and the output layer) on host B, and each host's buffers
    (MiB; a: host A, b: the workers on B); or `error` alone."""

    error: str
    layers_on_b: int
    layers_total: int
    blocks_on_b: int
    output_on_b: bool
    model_mib_a: float
    model_mib_b: float
    kv_mib_a: float
    kv_mib_b: float
    compute_mib_a: float
    compute_mib_b: float


class ProcessMemory(TypedDict):
    """A process's resident and peak resident memory (MiB; a launch record's `memory`,
    by process key); None where its host does not say."""

    rss_mib: float | None
    peak_rss_mib: float | None


def placement(log: str) -> Placement:
    """Where llama-server put the model, from its start-up log: the blocks and whether
    the output layer sit on host B (llama.cpp counts RPC workers as GPUs), and each
    host's model, KV and compute buffers (MiB). `error` where the log does not say."""
    offloaded = _OFFLOADED.search(log)
    if offloaded is None:
        return {"error": "the server's start-up log does not say where the layers went "
                         "(it is written at verbosity 4 and above)"}
    repeating = _REPEATING.search(log)
    found: Placement = {
        "layers_on_b": int(offloaded.group(1)),
        "layers_total": int(offloaded.group(2)),  # the blocks and the output layer
        "blocks_on_b": int(repeating.group(1)) if repeating else 0,
        "output_on_b": "offloading output layer to GPU" in log,
    }
    for device, kind, mib in _BUFFER.findall(log):
        # RPC0[10.0.0.2:20480], RPC1[...]: the workers on B; CPU, CPU_Mapped, ...: A.
        key = f"{kind.lower()}_mib_{'b' if device.startswith('RPC') else 'a'}"
        found[key] = round(found.get(key, 0.0) + float(mib), 2)
    return found


def _warm_up(url: str) -> None:
    body = {"prompt": [3, 4, 5, 6, 7, 8, 9, 10], "n_predict": 4, "cache_prompt": False,
            "ignore_eos": True, "temperature": 0}
    lifecycle.warm_up(url, "/completion", body, 120)


def memory_mib(host: Host, pid: int) -> ProcessMemory:
    """Resident and peak resident memory of a process on its host (MiB)."""
    text = host.run(["cat", f"/proc/{pid}/status"], check=False).stdout
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)

    def mib(name: str) -> float | None:
        value = fields.get(name, "").split()
        return round(int(value[0]) / 1024, 1) if value else None

    return {"rss_mib": mib("VmRSS"), "peak_rss_mib": mib("VmHWM")}
