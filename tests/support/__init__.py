"""Helpers shared by the tests: one place for each idea (free ports, the machine's
network namespaces, processes still running, a cell's request file, a run's copy and
the report's tables)."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


@contextlib.contextmanager
def cpu_hogs(count: int = 2) -> Iterator[None]:
    """`count` busy-loop processes beside the measurement, as on a busy machine."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(0.5)  # let them take the CPUs
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def free_port() -> int:
    """A loopback port nothing listens on (bound once to learn it, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def namespaces(*prefixes: str) -> list[str]:
    """Names of the machine's network namespaces; with `prefixes`, only those starting
    with one of them."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = [line.split()[0] for line in listed.splitlines() if line.split()]
    return [name for name in names if name.startswith(prefixes)] if prefixes else names


@dataclass(frozen=True)
class Process:
    pid: int
    name: str  # the command name (/proc/PID/comm)
    args: str  # the command line, arguments separated by spaces
    session: int
    cwd: Path | None  # None where it cannot be read


def process(pid: int | str) -> Process | None:
    """The running process `pid`, or None for one that has ended (a zombie has ended too)
    or ends while it is read."""
    proc = Path(f"/proc/{pid}")
    try:
        stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        name = (proc / "comm").read_text().strip()
    except (OSError, IndexError):
        return None
    if stat[0] in ("Z", "X"):
        return None
    cwd = None
    with contextlib.suppress(OSError):
        cwd = Path(os.readlink(proc / "cwd"))
    return Process(int(pid), name, args, int(stat[3]), cwd)


def processes() -> Iterator[Process]:
    """The machine's running processes (none that ends while they are read)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and (found := process(proc.name)) is not None:
            yield found


def procs_left(work: Path) -> list[str]:
    """Names of processes still running from this workflow copy, and no other: those
    whose command line names a path in it, and those started in it (a job starts its
    servers in the copy, and ggml-rpc-server's command line names no path). Another
    test's or program's servers on the machine are not this run's."""
    work = Path(os.path.realpath(work))
    return [proc.name for proc in processes()
            if str(work) in proc.args
            or (proc.cwd is not None and (proc.cwd == work or work in proc.cwd.parents))]


def commands_in(ns: str) -> list[str]:
    """Command lines of the processes running in network namespace `ns` (one that ends
    while they are read is left out)."""
    left = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [found.args for pid in left.stdout.split() if (found := process(pid)) is not None]


def write_cell(root: Path, link: str, ctx: str, conc: int, rows: list[dict],
               suffix: str = "") -> str:
    """A cell's requests file under `root`, as the workflow lays it out, holding `rows`."""
    path = root / "cells" / "lab" / link / "m" / f"ctx{ctx}_c{conc}{suffix}.requests.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def run_copy(work: Path, tmp_path: Path) -> Path:
    """A copy of a run's work directory, for a test that changes it: the run stays as it
    was for the tests that read it, whatever their order. `cp -a` keeps what Snakemake
    plans by (modification times; .snakemake's records name files relatively) and the
    results' hard links (results/.kept); run state (.splitbench) is found relative to the
    directory a job runs in. The model records keep the run's absolute GGUF paths: the
    copy's servers load the run's model files, which nothing writes to."""
    copied = tmp_path / "wf"
    subprocess.run(["cp", "-a", str(work), str(copied)], check=True)
    return copied


def table_after(html: str, marker: str) -> list[dict[str, str]]:
    """The rows of the report's first table after `marker`, by column title, as text."""
    table = html.split(marker, 1)[1].split("</table>", 1)[0]

    def texts(row: str, tag: str) -> list[str]:
        return [unescape(re.sub(r"<[^>]+>", "", cell)).strip()
                for cell in re.findall(rf"<{tag}[^>]*>(.*?)</{tag}>", row, re.S)]

    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)
    titles = texts(rows[0], "th")
    return [dict(zip(titles, texts(row, "td"), strict=True)) for row in rows[1:]]
