"""A streaming reader in its own process, stopped from outside for 20-50 ms at a time
(SIGSTOP, SIGCONT) while it reads: what a busy machine does to a client."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time

from tests.conftest import ROOT

# The client in its own process, so that it can be stopped from outside like a reader
# the scheduler does not run: prints each reply's clock and token times as JSON.
READER = """
import json, sys
from splitbench.backends.llamacpp import api
url, streams, n_predict = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
prompts = json.loads(sys.argv[4]) if len(sys.argv) > 4 else [[1]] * streams
replies = api.run_concurrent(url, prompts, n_predict, timeout=60)
print(json.dumps([{"clock": r.arrival_clock, "error": r.error_type, "final": r.final,
                   "times": [t["t_ns"] for t in r.tokens]} for r in replies]))
"""


def starve(pid: int, start: threading.Event, until: threading.Event,
           pauses: list[tuple[int, int]]) -> None:
    """Stop the process for 20-50 ms at a time, about every 80 ms, from when `start`
    is set until `until` is; record each pause's (stop, continue) instants."""
    start.wait(30)
    lengths = itertools.cycle([0.02, 0.035, 0.05])
    while not until.is_set():
        time.sleep(0.03)
        stopped = time.time_ns()
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            return  # the reader has finished
        time.sleep(next(lengths))
        with contextlib.suppress(ProcessLookupError):  # it ended as it was stopped
            os.kill(pid, signal.SIGCONT)
        pauses.append((stopped, time.time_ns()))


def run_starved(args: list[str], start: threading.Event, pauses: list[tuple[int, int]],
                prefix: tuple[str, ...] = ()) -> list[dict]:
    """Run READER with args (after `prefix`, e.g. ip netns exec) while `starve` stops
    it; its replies."""
    reader = subprocess.Popen([*prefix, sys.executable, "-c", READER, *args],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    done = threading.Event()
    stopper = threading.Thread(target=starve, args=(reader.pid, start, done, pauses))
    stopper.start()
    try:
        out, _ = reader.communicate(timeout=120)
    finally:
        done.set()
        stopper.join()
        if reader.poll() is None:  # a timeout: never leave it stopped
            reader.kill()
    assert reader.returncode == 0
    return json.loads(out)
