"""The launches running on a pair, whatever their backend: one per slot, each a record
of its processes (stopped in order) and of what to clean up after them.

A pair runs one launch per slot: a cell's own (""), a paired cell's baseline
("reference"), a delay sweep's points ("point<i>"), each on its own HTTP port on host A.
A new launch in a slot stops whatever ran there before, of either backend.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from splitbench import pairs
from splitbench.backends import server_http
from splitbench.contracts.records import LaunchRecord
from splitbench.contracts.slices import LinkSlice, ServerSettings
from splitbench.errors import SplitbenchError
from splitbench.infra import files, procs, remote_pids
from splitbench.infra.hosts import HostError
from splitbench.infra.leftovers import stop_recorded
from splitbench.infra.polling import poll_until
from splitbench.links import guard
from splitbench.links.link import FIRST_POINT_SLOT, MAX_SLOTS, Link

if TYPE_CHECKING:
    from splitbench.infra.procs import ProcRecord

class LaunchError(SplitbenchError):
    """A block's servers did not come up (either backend); the message says which and
    carries its log's tail."""


# Each slot's index among a run's per-slot ports (the HTTP port, the backend's own port).
SLOT_INDEX = {"": 0, "reference": 1, **{f"point{i}": FIRST_POINT_SLOT + i
                                         for i in range(MAX_SLOTS - FIRST_POINT_SLOT)}}


@dataclass(frozen=True)
class Server:
    """A running launch (splitbench.backends.Launch)."""

    url: str
    launch_id: str
    fingerprint: str
    record: LaunchRecord

    def alive(self) -> bool:
        return all(
            (rec := procs.find(key)) is not None and procs.is_alive(rec)
            for key in self.record["proc_keys"]
        )


def launch_block(link_spec: LinkSlice, settings: ServerSettings,
                 start: Callable[[Link], LaunchRecord], *,
                 reasons: Iterable[str | None] = (), backend: str | None = None,
                 fingerprint_of: Callable[[Link], str] | None = None) -> LaunchRecord:
    """The launch stage, the same steps for every backend: the first reason the block
    cannot be launched (the backend's `reasons`, such as a failed toolchain record, then
    the link's verification), else the pair locked, its link ensured and `start(link)`'s
    record (the servers launched or reused). A block that cannot be launched, or whose
    servers fail, is a record too (status "failed" and its error): a result of the
    matrix, which its cells then report. Re-make what failed, then the launch, to try
    again."""
    from splitbench.links import verify  # pandas: the launch stage's, not a cell's

    pair, name = link_spec["pair"], link_spec["link"]
    failed: LaunchRecord = {"status": "failed", "failed_at": time.time(), "pair": pair,
                            "link": name, "settings": settings, "fingerprint": None}
    if backend:
        failed["backend"] = backend
    why = next((reason for reason in reasons if reason), None) or \
        verify.verification_failure(pair, name)
    if why:
        return {**failed, "error": why}
    with pairs.turn(link_spec):
        link = pairs.ensure_link(link_spec)
        try:
            return start(link)
        except (LaunchError, HostError, httpx.HTTPError) as exc:
            return {**failed, "error": str(exc), "failed_at": time.time(),
                    "fingerprint": fingerprint_of(link) if fingerprint_of else None}


def healthy(url: str) -> bool:
    """The launch's HTTP server answers /health with 200 (both backends' servers do once
    the model is loaded)."""
    try:
        return server_http.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def warm_up(url: str, path: str, body: dict[str, Any], timeout_s: float) -> None:
    """Send the launch one short request and discard it: a launch's first request pays
    one-off costs (llama.cpp's extra round trips; vLLM's first forward pass, many times
    the next one's: docs/backends.md) that no measured request, anchor or cell, may
    carry."""
    server_http.post(f"{url}{path}", body, timeout=timeout_s).raise_for_status()


def log_tail(proc: ProcRecord | None, lines: int = 25) -> str:
    """The last lines of a launch process's log, for the error that names it: on this
    machine, or on host B for a remote one (read there while its record stands, from
    the copy kept here once it is forgotten: procs.forget_process)."""
    if proc is None or not proc.get("log"):
        return "(no log)"
    if proc.get("remote"):
        kept = procs.remote_logs_dir() / f"{proc['key']}.log"
        if kept.exists():
            return "\n".join(kept.read_text(errors="replace").splitlines()[-lines:])
        read = remote_pids.remote_run(proc["remote"], ["tail", "-n", str(lines), "--",
                                                 str(proc.get("remote_log"))])
        if read is None or read.returncode != 0:
            return f"(its log on host b, {proc['log']}, could not be read)"
        return read.stdout.rstrip()[-8000:]  # lines of a runaway log are capped too
    try:
        return "\n".join(Path(proc["log"]).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_healthy(url: str, processes: dict[str, Callable[[], ProcRecord | None]],
                 timeout_s: float, what: str, setting: str | None = None,
                 meanwhile: Callable[[], None] | None = None) -> None:
    """Until the launch's server answers /health, each of its processes alive (either
    backend). `processes`: each one's name in an error ("llama-server", "vLLM rank 1 on
    host B") and how to find its record now. A process that ends fails the launch at
    once; a server not healthy after `timeout_s` (a rank 0 whose peer never joins waits
    forever by itself) fails it then, naming the `setting` that gives it. Either error
    carries the logs' last lines. `meanwhile`: a check made while waiting, which ends
    the wait by raising (the launch's listeners, say)."""
    def up() -> bool:
        if meanwhile is not None:
            meanwhile()
        for name, find in processes.items():
            proc = find()
            if proc is None or not procs.is_alive(proc):
                how = (procs.exit_status(proc) if proc else None) or "exited"
                raise LaunchError(f"{name} {how} during start-up; the last lines of its "
                                  f"log:\n{log_tail(proc)}")
        return healthy(url)

    if poll_until(up, timeout_s, 0.2):
        return
    tails = "\n".join(f"{name}:\n{log_tail(find())}" for name, find in processes.items())
    within = f"{timeout_s:g} s" + (f" ({setting})" if setting else "")
    raise LaunchError(f"{what} not healthy after {within}; the last lines of each log:\n"
                      f"{tails}")


def fingerprint(link: Any, settings: ServerSettings, model_sha: str, build_id: str) -> str:
    """What a launch is: its link, server settings, model and build. A running launch is
    reused only by a cell that wants exactly this."""
    text = json.dumps(
        {"link": link.name, "connect": link.connect_addr, "server": settings,
         "model": model_sha, "build": build_id},
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def http_port(link: Link, slot: str) -> int:
    """The launch's HTTP port on host A: in the run's block (links/link.py's Ports)."""
    return link.ports.http(SLOT_INDEX[slot])


def named(pair: str, slot: str) -> str:
    """A launch's name: the pair, and the slot when it is not the default one."""
    return f"{pair}-{slot}" if slot else pair


def record_path(pair: str, slot: str = "") -> Path:
    return procs.state_dir() / "servers" / f"{named(pair, slot)}.json"


def current(pair: str, slot: str = "") -> Server | None:
    record = procs.read_record(record_path(pair, slot))
    if record is None:
        return None
    return Server(record["url"], record["launch_id"], record["fingerprint"], record)


def save(record: LaunchRecord, pair: str, slot: str) -> Server:
    procs.records_dir("servers")  # made private before a record is written there
    files.write_json(record_path(pair, slot), record)
    return Server(record["url"], record["launch_id"], record["fingerprint"], record)


def stop(pair: str, slot: str = "") -> None:
    """Stop the pair's launch in `slot`: its processes in their recorded order (the
    front end before its workers), then what it left behind (`cleanup`: per host, the
    paths it made and the shared-memory files its own processes mapped)."""
    server = current(pair, slot)
    if server is not None:
        stop_recorded(server.record, record_path(pair, slot))


def open_listeners(link: Link, keys: list[str]) -> list[str]:
    """On a real link, the launch's listeners beyond the link, TCP or UDP (on every
    address of a host, or on one that is neither the link's nor loopback), at a port its
    firewall guard does not cover (with `firewall: own` nothing is covered: the user's
    firewall is not splitbench's to trust), as "host b: *:41771 (VLLM::Worker_TP)":
    reachable from a network that host is on besides the cable. (The lab's namespaces
    reach nothing else.)"""
    if link.emulation.get("mode") != "real":
        return []
    guarded = link.emulation.get("firewall", "guard") == "guard"
    found = []
    for host in (link.host_a, link.host_b):
        sessions = [record["pid"] for record in map(procs.find, keys)
                    if record is not None and record.get("host") == host.name]
        found += [f"host {host.name}: {listener}"
                  for listener in guard.uncovered_listeners(
                      host, sessions, link.ports if guarded else None,
                      kept_to={link.addr_a, link.addr_b, link.connect_addr})]
    return found


def refuse_open_listeners(link: Link, keys: list[str]) -> None:
    """A launch with a listener beyond the link fails (a result: it is then stopped)."""
    wide = open_listeners(link, keys)
    if wide:
        raise LaunchError(f"link {link.pair}/{link.name}: the launch listens beyond the "
                          f"link (on every address of a host, or one the link does not "
                          f"have) at ports the firewall guard does not cover: "
                          f"{'; '.join(wide)}")


def listeners_checked(link: Link, keys: list[str], every_s: float = 2.0
                      ) -> Callable[[], None]:
    """refuse_open_listeners, made at most every `every_s` while a launch waits for
    health: a server listening on every address is refused while it loads, not after."""
    last = -every_s

    def check() -> None:
        nonlocal last
        if time.monotonic() - last >= every_s:
            last = time.monotonic()
            refuse_open_listeners(link, keys)

    return check
