"""The launches running on a pair, whatever their backend: one per slot, each a record
of its processes (stopped in order) and of what to clean up after them.

A pair runs one launch per slot: a cell's own (""), a paired cell's baseline
("reference"), a delay sweep's points ("point<i>"), each on its own HTTP port on host A.
A new launch in a slot stops whatever ran there before, of either backend.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from splitbench.infra import procs
from splitbench.infra.hosts import Host

HTTP_PORT = 8080
SLOT_PORTS = {"": 0, "reference": 1, **{f"point{i}": 2 + i for i in range(16)}}


@dataclass(frozen=True)
class Server:
    """A running launch (splitbench.backends.Launch)."""

    url: str
    launch_id: str
    fingerprint: str
    record: dict[str, Any]

    def alive(self) -> bool:
        return all(
            (rec := procs.find(key)) is not None and procs.is_alive(rec)
            for key in self.record["proc_keys"]
        )


def healthy(url: str) -> bool:
    """The launch's HTTP server answers /health with 200 (both backends' servers do once
    the model is loaded)."""
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def fingerprint(link: Any, settings: dict[str, Any], model_sha: str, build_id: str) -> str:
    """What a launch is: its link, server settings, model and build. A running launch is
    reused only by a cell that wants exactly this."""
    text = json.dumps(
        {"link": link.name, "connect": link.connect_addr, "server": settings,
         "model": model_sha, "build": build_id},
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def http_port(host_a: Host, slot: str) -> int:
    """The launch's HTTP port on host A (beside the lab's own ports when A is this
    machine's loopback)."""
    return (HTTP_PORT if host_a.netns else HTTP_PORT + 10000) + SLOT_PORTS[slot]


def named(pair: str, slot: str) -> str:
    """A launch's name: the pair, and the slot when it is not the default one."""
    return f"{pair}-{slot}" if slot else pair


def record_path(pair: str, slot: str = "") -> Path:
    return procs.state_dir() / "servers" / f"{named(pair, slot)}.json"


def current(pair: str, slot: str = "") -> Server | None:
    path = record_path(pair, slot)
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    return Server(record["url"], record["launch_id"], record["fingerprint"], record)


def save(record: dict[str, Any], pair: str, slot: str) -> Server:
    path = record_path(pair, slot)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))
    return Server(record["url"], record["launch_id"], record["fingerprint"], record)


def stop(pair: str, slot: str = "") -> None:
    """Stop the pair's launch in `slot`: its processes in their recorded order (the
    front end before its workers), then what it left behind (`cleanup`: per host, paths
    to remove)."""
    server = current(pair, slot)
    if server is None:
        return
    for key in server.record["proc_keys"]:
        procs.stop(key)
    for leftover in server.record.get("cleanup", []):
        remove_leftovers(leftover)
    record_path(pair, slot).unlink(missing_ok=True)


def remove_leftovers(leftover: dict[str, Any]) -> None:
    """Remove a stopped launch's files on one host (its `host` record: local, namespace
    or SSH): `paths` (files and directories), and what matches `patterns` now but did
    not before the launch (`before`: another program's files are not ours)."""
    host = Host(**leftover["host"])
    paths = [str(p) for p in leftover.get("paths", [])]
    if leftover.get("patterns"):
        before = set(leftover.get("before", []))
        paths += [p for p in matching(host, leftover["patterns"]) if p not in before]
    if paths:
        host.run(["rm", "-rf", "--", *paths], check=False)


def matching(host: Host, patterns: list[str]) -> list[str]:
    """The paths on `host` that match shell patterns (each expanded by the host's shell)."""
    listed = host.run(["sh", "-c", 'for p in "$@"; do ls -1d -- $p 2>/dev/null; done',
                       "sh", *patterns], check=False).stdout
    return listed.split()
