"""What /proc says of a process on this machine: its start time (which tells it from a
later process given the same pid), whether it is a zombie, its parent, its command name,
and the outermost process of a cluster job it runs in."""

from __future__ import annotations

from pathlib import Path


def start_time(pid: int) -> int | None:
    """The kernel's start time of a process (clock ticks since boot), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22; the command name (field 2) may contain spaces, so split after ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])


def is_zombie(pid: int) -> bool:
    """Whether a process has ended but not been reaped (or is gone: no /proc entry)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def job_root(pid: int) -> int:
    """The job's outermost process of ours: the ancestor whose parent is slurmstepd (or
    the topmost one below init when there is none)."""
    while True:
        up = parent(pid)
        if up <= 1 or command_name(up).startswith("slurmstepd"):
            return pid
        pid = up


def parent(pid: int) -> int:
    """A process's parent pid (0 where it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def command_name(pid: int) -> str:
    """A process's command name (its `comm`; empty where it is gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
