"""When a job that drives a pair started and ended, in its log: one line each, written
by `stamped` and read back by `read` (the record of what ran when on a pair, and what
the estimate measures a run's jobs by: Snakemake's own metadata gives a group job's
members the group's times)."""

from __future__ import annotations

import contextlib
import re
import socket
import time
from collections.abc import Iterator

_LINE = re.compile(r"^splitbench: \S+ (started|ended) at (\d+) ns", re.MULTILINE)


@contextlib.contextmanager
def stamped(name: str) -> Iterator[None]:
    """Print `name`'s start and end (ns since the epoch) and the host it ran on."""
    host = socket.gethostname()
    print(f"splitbench: {name} started at {time.time_ns()} ns on {host}", flush=True)
    try:
        yield
    finally:
        print(f"splitbench: {name} ended at {time.time_ns()} ns on {host}", flush=True)


def read(log: str) -> tuple[int, int] | None:
    """A log's (start, end) in ns, or None where it lacks either line."""
    found = dict((kind, int(ns)) for kind, ns in _LINE.findall(log))
    if "started" in found and "ended" in found:
        return found["started"], found["ended"]
    return None
