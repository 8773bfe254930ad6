"""What a launch leaves on its hosts once its servers are stopped, and its stopping by
record: the processes of its record in their order, the scratch directories it made and
the shared-memory files its own session mapped, then the record. Teardown stops every
recorded launch this way (it knows records, not backends); the backends record what
their launches leave (`backends.lifecycle`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from splitbench.contracts.records import LaunchRecord
from splitbench.infra import files, procs
from splitbench.infra.hosts import Host, HostError

if TYPE_CHECKING:
    from splitbench.infra.hosts import HostJson
    from splitbench.infra.procs import ProcRecord


class Leftovers(TypedDict, total=False):
    """What a launch leaves on one host (an entry of its record's `cleanup`): the host,
    the directories it made, the session whose shared-memory files it maps (its leading
    rank's pid and start time; real hosts only), and those files."""

    host: HostJson
    paths: list[str]
    session: int
    session_start: int | None
    shm: list[str]


def stop_recorded(record: LaunchRecord, path: Path) -> bool:
    """Stop the launch `record` (saved at `path`), then remove what it left and its
    record. A process of it that stays on record (its host could not be reached) keeps
    the launch's record too, leftovers and all, for the next teardown: False then.
    HostError: a host did not answer while its leftovers were listed or removed."""
    cleanup = record.get("cleanup", [])
    for leftover in cleanup:  # what they map now, before they go
        leftover["shm"] = sorted({*leftover.get("shm", []), *shm_of(leftover)})
    for key in record["proc_keys"]:
        procs.stop(key)
    if any(procs.find(key) is not None for key in record["proc_keys"]):
        files.write_json(path, record)  # with the files seen mapped, for the next try
        return False
    for leftover in cleanup:
        remove_leftovers(leftover)
    path.unlink(missing_ok=True)
    return True


def stop_all(spare: Iterable[str] = ()) -> list[str]:
    """Stop every recorded launch (teardown's), but one that holds a key in `spare`;
    returns what it did. One whose host cannot be reached stays on record."""
    done = []
    for path in sorted((procs.state_dir() / "servers").glob("*.json")):
        record = procs.read_record(path)
        if record is None:  # torn: nothing to stop
            path.unlink(missing_ok=True)
            continue
        if set(record.get("proc_keys", [])) & set(spare):
            continue
        running = [f"stopped {proc['role']} pid {proc['pid']}"
                   for proc in map(procs.find, record.get("proc_keys", []))
                   if proc is not None and procs.is_alive(proc)]
        try:
            stopped = stop_recorded(record, path)
        except HostError as exc:
            done.append(f"could not remove what launch {path.stem} left: {exc}; kept on "
                        "record, the next teardown tries again")
            continue
        done += running if stopped else []
        done.append(f"stopped launch {path.stem} and removed what it left" if stopped else
                    f"could not stop every process of launch {path.stem}: kept on record, "
                    "the next teardown tries again")
    return done


# The /dev/shm files mapped by the processes of one session on a host (a rank and the
# engine and workers it started), one a line: the last field of a /proc/<pid>/maps line
# that is a file directly under /dev/shm; a file already removed says "(deleted)".
_SHM_MAPPED = ('for pid in $(ps -o pid= -s "$1"); do cat "/proc/$pid/maps"; done '
               "2>/dev/null | sed -n 's|^[^/]*\\(/dev/shm/[^/]*\\)$|\\1|p' "
               "| grep -v ' (deleted)$' | sort -u")


def shm_of(leftover: Leftovers) -> list[str]:
    """The shared-memory files the leftover's session (`session`: the pid of the rank
    that leads it) maps on its host now. Only these are ever removed: a name another
    program, or another user, put in /dev/shm is not splitbench's to delete. A leader
    that is not the recorded process (gone, its pid reused, its start time unknown)
    leads no session of ours: nothing is listed."""
    session = leftover.get("session")
    if not session:
        return []
    host = Host(**leftover["host"])
    leader: ProcRecord = {"pid": session, "start_time": leftover.get("session_start")}
    if host.remote:
        leader["remote"] = host.ssh_settings()
    if not procs.is_alive(leader):
        return []
    listed = host.run(["sh", "-c", _SHM_MAPPED, "sh", str(session)], check=False).stdout
    return [line for line in listed.splitlines() if line.startswith("/dev/shm/")]


# The only directories a launch's cleanup removes: those `mktemp -d` made on the host
# from a backend's `scratch_template` (GNU mktemp fills the X's with letters and digits).
SCRATCH_PATTERN = re.compile(r"/tmp/sb-[a-z][a-z0-9_]{0,31}-[A-Za-z0-9]{8}")


def scratch_template(backend: str) -> str:
    """The `mktemp -d` template of a backend's scratch directories on a host."""
    template = f"/tmp/sb-{backend}-XXXXXXXX"
    if not is_scratch(template.replace("X", "a")):
        raise ValueError(f"'{backend}' cannot name a scratch directory")
    return template


def is_scratch(path: str) -> bool:
    """`path` is a launch's scratch directory by its name: nothing else is `rm -rf`ed."""
    return SCRATCH_PATTERN.fullmatch(path) is not None


# Removes each argument that is still a regular file (not a link) owned by this user.
_REMOVE_OWN_FILES = ('for f in "$@"; do [ -f "$f" ] && [ ! -L "$f" ] && [ -O "$f" ] '
                     '&& rm -f -- "$f"; done; true')


def remove_leftovers(leftover: Leftovers) -> None:
    """Remove a stopped launch's files on one host (its `host` record: local, namespace
    or SSH): `paths`, the directories it made for itself, and `shm`, the shared-memory
    files its own processes were seen mapping (regular files of this user only). Every
    path goes to the host as one argument: no name is split or expanded; a path that is
    not a scratch directory's name (`is_scratch`) is never removed."""
    host = Host(**leftover["host"])
    paths = [str(p) for p in leftover.get("paths", []) if is_scratch(str(p))]
    if paths:
        host.run(["rm", "-rf", "--", *paths], check=False)
    shm = [str(p) for p in leftover.get("shm", []) if str(p).startswith("/dev/shm/")]
    if shm:
        host.run(["sh", "-c", _REMOVE_OWN_FILES, "sh", *shm], check=False)
