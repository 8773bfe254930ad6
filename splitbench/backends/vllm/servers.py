"""vLLM launch across the pair: rank 0 on host A (the API server, on A's loopback), the
headless rank 1 on host B, tensor or pipeline parallel between them over the link.

Each rank advertises and binds its link address (VLLM_HOST_IP, GLOO_SOCKET_IFNAME: the
link's interface), so that their connections cross exactly the link under test; the
launch checks that they do. One exception vLLM does not let us pin: rank 0's rendezvous
store (torch's TCPStore, `--master-port`) listens on every address of host A. In the
lab, host A is a network namespace that holds only the pair's links; on real hosts,
docs/backends.md says what to firewall.

In the lab both hosts share one filesystem: each rank gets a /dev/shm of its own (a
private mount namespace with a tmpfs), or vLLM would see the other rank as a local one
and talk to it through shared memory instead of the link. Every process is recorded and
stopped by process group (vLLM starts an engine and workers under each rank), and the
files vLLM leaves (its temporary sockets; /dev/shm on a real host) are removed.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict
from pathlib import Path

from splitbench import backends
from splitbench.backends import lifecycle
from splitbench.backends.base import toolchain_failure
from splitbench.backends.lifecycle import LaunchError
from splitbench.backends.vllm.api import SERVED_NAME
from splitbench.contracts.records import LaunchRecord, ModelInfo, ToolchainRecord
from splitbench.contracts.slices import LinkSlice, ServerSettings
from splitbench.infra import procs, sockdiag
from splitbench.infra.hosts import Host
from splitbench.infra.leftovers import Leftovers, is_scratch, scratch_template, shm_of
from splitbench.links.link import Link

# Where a launch's ranks keep what they write on a host (removed when it stops).
SCRATCH = scratch_template("vllm")


def ensure(link: Link, settings: ServerSettings, model_path: str, model_sha: str,
           toolchain: ToolchainRecord, slot: str = "") -> lifecycle.Server:
    """A healthy launch with exactly this fingerprint: reused, or started now (whatever
    ran in the slot before, of either backend, is stopped first)."""
    wanted = lifecycle.fingerprint(link, settings, model_sha,
                                  toolchain["a"]["vllm"]["version"])
    with procs.locked(f"server-{link.pair}"):
        server = lifecycle.current(link.pair, slot)
        if server is not None and server.fingerprint == wanted and server.alive():
            with link.host_a.entered():
                if lifecycle.healthy(server.url):
                    return server
        lifecycle.stop(link.pair, slot)
        why = unusable(link)
        if why:
            raise LaunchError(why)
        started: list[str] = []
        try:
            return _start(link, settings, model_path, wanted, toolchain, slot, started)
        except BaseException:
            # Nothing of a failed launch may outlive it: nothing else knows it is ours.
            lifecycle.stop(link.pair, slot)
            for key in started:
                procs.stop(key)
            raise


def launch_record(link_spec: LinkSlice, settings: ServerSettings,
                  model: ModelInfo, toolchain: ToolchainRecord) -> LaunchRecord:
    """The launch stage for a vLLM block (`toolchain`: the pair's vLLM record): its ranks
    launched (or reused) and their record, which carries that toolchain for the cells;
    or one saying why they could not be (`lifecycle.launch_block`)."""

    def start(link: Link) -> LaunchRecord:
        record = ensure(link, settings, model["path"], model["sha256"], toolchain).record
        return {**record, "toolchain": toolchain}

    return lifecycle.launch_block(link_spec, settings, start, backend="vllm",
                                 reasons=[toolchain_failure(toolchain)])


def unusable(link: Link) -> str | None:
    """Why vLLM cannot be measured over this link (None when it can): its ranks must be
    hosts of their own, and an added delay must apply to all their traffic."""
    where = f"link {link.pair}/{link.name}"
    if link.host_a.netns is None and link.host_b.netns is None and not link.host_b.remote:
        return (f"{where}: vLLM's two ranks on one machine need the lab's network "
                "namespaces (root); on a shared loopback they would share memory instead "
                "of crossing the link")
    if link.emulation.get("delay") == "relay" and link.emulation.get("delay_ms"):
        return (f"{where}: its {link.emulation['delay_ms']} ms delay is added by a relay "
                "that carries llama.cpp's RPC ports only (this kernel has no netem); vLLM's "
                "ranks connect on ports of their own choosing, which the relay cannot "
                "carry. Measure vLLM on links without added delay here, or on a kernel "
                "with netem")
    return None


def _require_model_on_b(link: Link, model_path: str) -> None:
    """Each rank loads the model from its own disk, at the path rank 0 names: on a
    remote host B it must be there before anything starts (a synthetic model is written
    on host A only)."""
    if not link.host_b.remote:
        return
    where = str(Path(model_path).resolve())
    if link.host_b.run(["test", "-f", f"{where}/config.json"], check=False).returncode:
        raise LaunchError(
            f"host B ({link.host_b.ssh}) has no model at {where} (no config.json there): "
            "vLLM's ranks each load the model from the same path on their own host; copy "
            f"the directory there first (rsync -a {where}/ {link.host_b.ssh}:{where}/)")


def _start(link: Link, settings: ServerSettings, model_path: str, wanted: str,
           toolchain: ToolchainRecord, slot: str, started: list[str]) -> lifecycle.Server:
    _require_model_on_b(link, model_path)
    launch_id = uuid.uuid4().hex[:12]
    logs = procs.state_dir() / "logs"
    port = lifecycle.http_port(link, slot)
    master_port = link.ports.backend_own(lifecycle.SLOT_INDEX[slot])
    name = lifecycle.named(link.pair, slot)
    common = _serve_args(settings, model_path, link.addr_a, master_port)
    ranks = [
        ("a", link.host_a, link.addr_a, link.interface_a, f"vllm0-{name}",
         [*common, "--node-rank", "0", "--host", "127.0.0.1", "--port", str(port)]),
        ("b", link.host_b, link.addr_b, link.interface_b, f"vllm1-{name}",
         [*common, "--node-rank", "1", "--headless"]),
    ]
    record: LaunchRecord = {
        "backend": "vllm", "launch_id": launch_id, "fingerprint": wanted,
        "url": f"http://127.0.0.1:{port}", "pair": link.pair, "link": link.name,
        "netns_a": link.host_a.netns, "proc_keys": [key for *_, key, _ in ranks],
        "settings": settings, "started_at": time.time(), "commands": {}, "environment": {},
        "cleanup": [],
        "parallel": backends.split(settings),
    }
    # The record exists from the first spawn on: a launch that fails is stopped through
    # it, leftovers and all.
    load_started = time.monotonic()
    for side, host, addr, ifname, key, args in ranks:
        scratch = _scratch(host)
        leftovers: Leftovers = {"host": asdict(host), "paths": [scratch]}
        record["cleanup"].append(leftovers)
        argv = _private_shm(host, [toolchain[side]["vllm"]["executable"], "serve", *args])
        env = _environment(settings, host, addr, ifname, scratch)
        started.append(key)
        rank = host.spawn(argv, role=f"vllm-rank{0 if side == 'a' else 1}", key=key,
                          log_path=logs / f"{launch_id}-vllm-{side}.log", env=env,
                          extra={"pair": link.pair, "group": True,
                                 "stops": "front" if side == "a" else "worker"})
        if host.netns is None:
            # A real host's /dev/shm: the files the rank's session maps there (a killed
            # rank leaves them), read once it is up and again at stop.
            leftovers["session"] = rank["pid"]
            leftovers["session_start"] = rank["start_time"]
        record["commands"][f"rank_{side}"] = argv
        record["environment"][f"rank_{side}"] = env
        lifecycle.save(record, link.pair, slot)
    with link.host_a.entered():
        lifecycle.wait_healthy(
            record["url"], {f"vLLM rank {_rank(key)} on host {_host_of(key)}":
                            lambda key=key: procs.find(key) for key in record["proc_keys"]},
            settings["launch_timeout_s"], "vLLM", "launch_timeout_s",
            meanwhile=lifecycle.listeners_checked(link, record["proc_keys"]))
        for leftovers in record["cleanup"]:
            leftovers["shm"] = shm_of(leftovers)
        record["load_s"] = round(time.monotonic() - load_started, 3)
        record["link_connections"] = _connections_over(link)
        lifecycle.warm_up(record["url"], "/v1/completions", _WARM_UP,
                          settings["launch_timeout_s"])
    # Nothing of it may listen beyond the link (a result: the launch fails, and stops):
    # checked while it loaded, and once more now that it serves.
    lifecycle.refuse_open_listeners(link, record["proc_keys"])
    return lifecycle.save(record, link.pair, slot)


_WARM_UP = {"model": SERVED_NAME, "prompt": [3, 4, 5, 6, 7, 8, 9, 10], "max_tokens": 4,
            "temperature": 0, "ignore_eos": True}


def _serve_args(settings: ServerSettings, model_path: str, master_addr: str,
                master_port: int) -> list[str]:
    return [
        str(Path(model_path).resolve()), "--served-model-name", SERVED_NAME,
        "--dtype", settings["dtype"],
        "--max-model-len", str(settings["max_model_len"]),
        "--max-num-seqs", str(settings["slots"]),
        # Every prompt computed in full, as llama.cpp's cells are (no prompt cache).
        "--no-enable-prefix-caching",
        # The server's own TTFT, generation time and inter-token latency per request.
        "--enable-per-request-metrics",
        "--tensor-parallel-size", str(settings["tensor_parallel"]),
        "--pipeline-parallel-size", str(settings["pipeline_parallel"]),
        "--nnodes", "2", "--master-addr", master_addr, "--master-port", str(master_port),
        *settings.get("extra_args", []),
    ]


def _environment(settings: ServerSettings, host: Host, addr: str, ifname: str | None,
                 scratch: str) -> dict[str, str]:
    cache = _cache_root(host)
    env = {
        # The address this rank advertises and binds, and the interface its collective
        # traffic (gloo) uses: the link's, never what the hostname resolves to.
        "VLLM_HOST_IP": addr,
        "VLLM_CPU_KVCACHE_SPACE": f"{settings['kv_cache_gib']:g}",
        # The host's own CPUs (the lab gives each host its own); one thread per core.
        "VLLM_CPU_OMP_THREADS_BIND": host.cpus or "auto",
        # A dead peer mid-request ends the request within this, not vLLM's 300 s.
        "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": f"{settings['step_timeout_s']:g}",
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
        # Its temporary sockets in the launch's scratch directory (removed at stop); its
        # caches (model info, compiled graphs) kept per host across launches and
        # workflow directories (tens of seconds per start).
        "TMPDIR": scratch,
        "VLLM_CACHE_ROOT": f"{cache}/vllm",
        "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor",
        "XDG_CACHE_HOME": f"{cache}/xdg",
    }
    if ifname:
        # gloo's (the CPU build's collectives) and NCCL's (GPUs') interface: the link's.
        env["GLOO_SOCKET_IFNAME"] = ifname
        env["NCCL_SOCKET_IFNAME"] = ifname
    return env


# The compile cache on an SSH host: in its user's home, only theirs. (A fixed /tmp path
# could be made first by another user, who would then plant the compiled code the
# ranks load.)
_REMOTE_CACHE = ('d="$HOME/.cache/splitbench/vllm"; '
                 'mkdir -p "$d" && chmod 700 "$d" && printf %s "$d"')


def _cache_root(host: Host) -> str:
    """vLLM's and torch's cache folder for this host's ranks, in its user's home. On
    one machine each host has its own (the lab's two hosts are one machine), outside the
    workflow directory, so that a second results directory does not start cold (a cold
    cache re-inspects the model's class in a fresh interpreter: docs/backends.md)."""
    if host.remote:
        return host.run(["sh", "-c", _REMOTE_CACHE]).stdout.strip()
    root = Path.home() / ".cache/splitbench/vllm-local"
    try:
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o700)  # its artifacts are loaded and run: only its user may write them
        (root / host.name).mkdir(exist_ok=True)
        return str(root / host.name)
    except OSError:  # a home that cannot be written (some cluster nodes): the run's own
        return str(procs.state_dir() / "vllm-cache" / host.name)


def _scratch(host: Host) -> str:
    """The rank's temporary directory, made now, new and its user's own (mktemp: a name
    no one could have made first). Short, under /tmp: vLLM binds its unix sockets there,
    and a socket's path holds at most 107 characters (a workdir's state directory can be
    deeper than that leaves room for). Its name is checked before it is recorded: it
    is removed with `rm -rf` at stop."""
    made = host.run(["mktemp", "-d", SCRATCH]).stdout.strip()
    if not is_scratch(made):
        raise LaunchError(f"host {host.name}: mktemp -d {SCRATCH} printed "
                          f"{made[:200]!r}, not a directory of that form (does a login "
                          "script there print to stdout?)")
    return made


# A command under this runs in a mount namespace of its own with a fresh /dev/shm, gone
# with its last process.
PRIVATE_SHM = ("unshare", "--mount", "--propagation", "private", "sh", "-c",
               'mount -t tmpfs -o mode=1777 splitbench-shm /dev/shm && exec "$@"', "sh")


def _private_shm(host: Host, argv: list[str]) -> list[str]:
    """In the lab, the rank with a /dev/shm of its own; a real host keeps its own."""
    return argv if host.netns is None else [*PRIVATE_SHM, *argv]


def _connections_over(link: Link) -> int:
    """The ranks' connections, from host A: every one from A's link address goes to B's
    link address (none bypasses the link), and there is at least one."""
    ours = [c for c in sockdiag.tcp_connections()
            if link.addr_a in (c.get("src"), c.get("dst"))]
    stray = sorted({f"{c['src']}->{c['dst']}" for c in ours
                    if link.addr_b not in (c.get("src"), c.get("dst"))})
    if stray:
        raise LaunchError(f"link {link.pair}/{link.name}: vLLM connections from the link's "
                          f"address go elsewhere: {', '.join(stray[:5])}")
    if not ours:
        raise LaunchError(f"link {link.pair}/{link.name}: the vLLM ranks serve, but no "
                          f"connection runs between {link.addr_a} and {link.addr_b}")
    return len(ours)


def _rank(key: str) -> str:
    return key[4]  # vllm0-..., vllm1-...


def _host_of(key: str) -> str:
    return "A" if key.startswith("vllm0") else "B"
