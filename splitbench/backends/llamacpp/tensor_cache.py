"""Weights sent to host B once: ggml-rpc-server's local tensor cache.

llama-server loads B's share of the weights through the RPC workers, over the link,
at every launch: a run of three links sends them three times. A worker started with
`--cache` keeps each tensor it receives that is larger than ggml's hash threshold
(10 MiB) in a file named by the tensor's hash, and llama-server offers the hash first:
where B has the file, only the hash crosses the link. Smaller tensors (norms, a small
model's every weight) cross at every launch as before.

The files live in one private directory per user on B (`<cache home>/splitbench/
rpc-tensors`, mode 0700), in a folder per pair (the worker adds `rpc/`), kept between
runs so that a second run sends nothing it sent before; `teardown --purge` removes it.
A pair's launches run one at a time, but pairs run side by side (two on one machine
share its home): in one folder, one pair's worker could read a file another's is still
writing, and a failed launch's clean-up could remove one another pair is reading. A
changed model file has other hashes, so its tensors are sent (and kept) again.

The worker does not check a file against its hash when it reads it: one cut short (a
launch stopped while the worker was writing it) would load silently truncated, and the
run would measure a wrong model with normal-looking timings. So the pair's folder holds
a marker, `loading`, from before its worker starts until the launch serves (the worker
writes a tensor's file before it answers the call that sent it, and the launch waited
for every answer): a launch that finds the marker (a kill -9, a crash on B, a lost SSH
connection mid-load: nothing was left to clean up) wipes the folder's files before its
worker starts, and a launch that fails removes them at once.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from pathlib import Path
from typing import TypedDict

from splitbench.infra import procs, remote_pids
from splitbench.infra.hosts import Host, HostError

# Where the directory and the pair's folder in it are made ($1: the pair), and the
# only shapes of path a purge and a failed launch's clean-up remove.
# A marker left by a launch that never served wipes what it may have cut short; the
# marker is then made again for this launch. Prints the directory, then "wiped" where
# it wiped.
MARKER = "loading"
MAKE_DIRECTORY = ('d="${XDG_CACHE_HOME:-$HOME/.cache}/splitbench/rpc-tensors"; '
                  'mkdir -p -m 700 "$d" && [ -d "$d" ] && [ ! -L "$d" ] && [ -O "$d" ] '
                  '&& chmod 700 "$d" && mkdir -p -m 700 "$d/$1" && [ ! -L "$d/$1" ] '
                  '&& printf "%s\\n" "$d" && { [ ! -e "$d/$1/' + MARKER + '" ] || '
                  '{ rm -rf -- "$d/$1/rpc" && echo wiped; }; } '
                  '&& : > "$d/$1/' + MARKER + '"')
CACHE_DIR = re.compile(r"^/[^\0]*/splitbench/rpc-tensors$")
PAIR_DIR = re.compile(r"^/[^\0]*/splitbench/rpc-tensors/[a-z0-9][a-z0-9_-]*$")


class TensorCache(TypedDict, total=False):
    """A launch's tensor cache (its record's `tensor_cache`): the directory on B and the
    worker's flag and environment, or why it runs without one."""

    dir: str  # the pair's folder in the user's directory
    flags: list[str]
    env: dict[str, str]
    why_not: str
    wiped: str  # why this launch found the folder's files unusable and removed them


def prepare(host: Host, worker: Path, env: dict[str, str] | None, pair: str) -> TensorCache:
    """The cache for a worker of `pair` on `host`: `--cache` where the worker has it,
    with its private directory and the pair's folder made (the directory recorded for
    `teardown --purge`); else why not."""
    assignments = [f"{k}={v}" for k, v in (env or {}).items()]
    try:
        helped = host.run(["env", *assignments, str(worker), "--help"], check=False)
    except HostError as exc:
        return {"why_not": f"could not ask the worker for its options: {exc}"}
    if "--cache" not in helped.stdout + helped.stderr:
        return {"why_not": f"host {host.name}'s ggml-rpc-server has no --cache"}
    try:
        made = host.run(["sh", "-c", MAKE_DIRECTORY, "sh", pair], check=False)
    except HostError as exc:
        return {"why_not": f"could not make its directory on host {host.name}: {exc}"}
    said = made.stdout.splitlines()
    directory = said[0] if said else ""
    if made.returncode != 0 or not CACHE_DIR.match(directory):
        return {"why_not": f"host {host.name} gave no private directory for it (a "
                           f"link, or another user's): {made.stderr.strip()[-200:]}"}
    _remember(host, directory)
    cache: TensorCache = {"dir": f"{directory}/{pair}", "flags": ["--cache"],
                          "env": {"LLAMA_CACHE": f"{directory}/{pair}/"}}
    if "wiped" in said[1:]:
        cache["wiped"] = "an earlier launch never finished loading: its files were removed"
    return cache


def loaded(host: Host, cache: TensorCache) -> None:
    """Once the launch serves: every file its workers wrote is whole, so the marker goes
    (the next launch of the pair keeps the files)."""
    if cache.get("dir") and PAIR_DIR.match(cache["dir"]):
        host.run(["rm", "-f", "--", f"{cache['dir']}/{MARKER}"])


def _remember(host: Host, directory: str) -> None:
    """Record the directory for `teardown --purge` (kept between runs: not a change a
    teardown undoes)."""
    remote = host.ssh_settings() if host.remote else None
    where = f"{host.ssh}:{host.ssh_port}" if host.remote else "local"
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{where}{directory}")[-150:]
    path = procs.records_dir("tensor_caches") / f"{name}.json"
    path.write_text(json.dumps({"host": host.name, "remote": remote, "path": directory}))


def discard(host: Host, cache: TensorCache) -> None:
    """After a launch that failed: remove the files it may have cut short (its pair's
    alone: no other pair's worker reads them)."""
    if cache.get("dir") and PAIR_DIR.match(cache["dir"]):
        # Unreachable now: `teardown --purge` removes the whole directory later.
        with contextlib.suppress(HostError):
            host.run(["rm", "-rf", "--", f"{cache['dir']}/rpc"], check=False)


def purge() -> list[str]:
    """Remove every recorded tensor cache (`teardown --purge`); one whose host cannot
    be reached stays on record."""
    done = []
    for path in sorted(procs.records_dir("tensor_caches").glob("*.json")):
        record = procs.read_record(path)
        if not record or not CACHE_DIR.match(str(record.get("path", ""))):
            path.unlink(missing_ok=True)
            continue
        # The directory, and its parent where that is left empty (splitbench's own).
        argv = ["sh", "-c", 'rm -rf -- "$1" && { rmdir -- "${1%/*}" 2>/dev/null; true; }',
                "sh", record["path"]]
        if record.get("remote"):
            result = remote_pids.remote_run(record["remote"], argv)
        else:
            result = subprocess.run(argv, capture_output=True, text=True)
        where = f"{record['path']} on host {record['host']}"
        if result is None:
            done.append(f"could not reach host {record['host']} to remove {where}: kept on "
                        "record")
        elif result.returncode == 0:
            path.unlink(missing_ok=True)
            done.append(f"removed the tensor cache {where}")
        else:
            done.append(f"could not remove {where}: {result.stderr.strip()}")
    return done
