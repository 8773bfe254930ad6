"""Host B's worker, put there by the run.

Where host B is another machine with no llama.cpp build of its own (no hosts.b.bin_dir),
the run carries A's: `ggml-rpc-server` and the shared libraries it links beyond the C
library (today's build links OpenMP's libgomp.so.1, which a minimal Debian lacks) are
copied over SFTP into a new private directory in the login user's home on B (mktemp -d,
mode 0700), checked there by hash, tried once (`--help`), and removed at teardown. B
then needs no llama-server and no venv: the worker is all that runs there, and it is
byte for byte A's, so the same-build check holds by construction.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import subprocess
from pathlib import Path

from splitbench.errors import SplitbenchError
from splitbench.infra import procs
from splitbench.infra.hosts import Host, HostError

WORKER = "ggml-rpc-server"
# Loaded from B's own system, never carried: the C library and its loader must be the
# ones B's other libraries were built with, the GPU driver's must match B's kernel
# module, and the vDSO is no file.
SYSTEM_LIBRARIES = ("linux-vdso.so", "ld-linux", "libc.so", "libm.so", "libpthread.so",
                    "libdl.so", "librt.so", "libresolv.so", "libcuda.so", "libnvidia-")
# The directory a copy lives in: the undo `rm -rf` of a record runs only on such a path.
COPY_DIR = re.compile(r"^/[^\0]*/\.splitbench-worker\.[A-Za-z0-9]{8}$")


class WorkerCopyError(SplitbenchError):
    """A's worker could not be put on host B, or does not run there."""


def carried_files(bin_dir: Path) -> dict[str, Path]:
    """The files B needs to run A's worker, by their name on B: the worker and the
    libraries `ldd` resolves for it on A, less the system's own (SYSTEM_LIBRARIES)."""
    worker = bin_dir / WORKER
    listed = subprocess.run(["ldd", str(worker)], capture_output=True, text=True)
    if listed.returncode != 0:
        raise WorkerCopyError(f"ldd {worker} failed on host A: {listed.stderr.strip()}")
    files = {WORKER: worker}
    for line in listed.stdout.splitlines():
        name, _, rest = line.strip().partition(" => ")
        if not rest or name.startswith(SYSTEM_LIBRARIES):
            continue
        if rest.startswith("not found"):
            raise WorkerCopyError(f"host A's {worker} needs {name}, which host A lacks")
        files[name] = Path(rest.split(" (", 1)[0]).resolve()
    return files


def digests(files: dict[str, Path]) -> dict[str, str]:
    return {name: hashlib.sha256(path.read_bytes()).hexdigest()
            for name, path in files.items()}


def environment(copy_dir: str) -> dict[str, str]:
    """The worker's environment on B: its carried libraries before B's own."""
    return {"LD_LIBRARY_PATH": copy_dir}


def carry(host: Host, bin_dir: Path, where: str) -> str:
    """A's worker on B, ready to run: the directory it is in there. Made once per run
    and pair of hosts (a launch after the first finds it on record and checks its hashes
    again), recorded before the first byte is sent so that teardown removes it."""
    files, sums = _local_build(bin_dir)
    key = "worker-copy-" + hashlib.sha256(
        json.dumps([host.ssh_settings(), sums], sort_keys=True).encode()).hexdigest()[:16]
    known = procs.change(key)
    if known is not None and _holds(host, known["dir"], sums):
        return known["dir"]
    made = host.run(["sh", "-c", 'mktemp -d "$HOME/.splitbench-worker.XXXXXXXX"'])
    copy_dir = made.stdout.strip()
    if not COPY_DIR.match(copy_dir):
        raise WorkerCopyError(f"{where}: host {host.name} made {copy_dir!r} for the worker, "
                              "not a directory of the expected form")
    procs.record_change(key, host.name, host.ssh_settings(), ["rm", "-rf", "--", copy_dir],
                        gone_if=[], dir=copy_dir)
    _send(host, files, copy_dir)
    if not _holds(host, copy_dir, sums):
        raise WorkerCopyError(f"{where}: the worker copied to host {host.name} "
                              f"({copy_dir}) does not match host A's by sha256")
    _try(host, copy_dir, where)
    return copy_dir


def remove(host: Host, copy_dir: str) -> None:
    """Take a copy off B now (the doctor's trial), and its record with it."""
    for record in procs.records_dir("changes").glob("worker-copy-*.json"):
        if (procs.read_record(record) or {}).get("dir") == copy_dir:
            host.run(["rm", "-rf", "--", copy_dir])
            procs.forget("changes", record.stem)


@functools.lru_cache(maxsize=8)
def _local_build(bin_dir: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """The files to carry and their sha256, read once per process: each launch of a
    cell job asks again, and the files (megabytes) do not change during a run."""
    files = carried_files(bin_dir)
    return files, digests(files)


def _send(host: Host, files: dict[str, Path], copy_dir: str) -> None:
    for name, path in files.items():
        host.put(path, f"{copy_dir}/{name}", mode=0o700 if name == WORKER else 0o600)


def _holds(host: Host, copy_dir: str, sums: dict[str, str]) -> bool:
    names = sorted(sums)
    checked = host.run(["sha256sum", "--", *(f"{copy_dir}/{n}" for n in names)],
                       check=False)
    if checked.returncode != 0:
        return False
    found = {Path(line.split(maxsplit=1)[1].strip()).name: line.split()[0]
             for line in checked.stdout.splitlines() if line.strip()}
    return found == sums


def _try(host: Host, copy_dir: str, where: str) -> None:
    """Run the copy once: a B whose C library is older than the one A built against, or
    whose CPU lacks an instruction A's build uses, fails here, before any cell."""
    try:
        tried = host.run(["env", *(f"{k}={v}" for k, v in environment(copy_dir).items()),
                          f"{copy_dir}/{WORKER}", "--help"], check=False, timeout=30)
    except HostError as exc:
        raise WorkerCopyError(f"{where}: {exc}") from exc
    if tried.returncode != 0:
        said = (tried.stderr or tried.stdout).strip()[-400:]
        raise WorkerCopyError(
            f"{where}: host A's {WORKER} does not run on host {host.name} "
            f"(exit {tried.returncode}: {said}). Build llama.cpp on the older of the two "
            "hosts (./bootstrap.sh's pinned source) and use that build on both "
            "(toolchain.source: path, each host's bin_dir), or give hosts.b.bin_dir a "
            "byte-identical build that runs on B")
