"""The delay relay, for kernels without netem: builds `relay.c` and gives its command.

The relay holds every byte of a TCP connection back by a fixed delay in each direction,
and keeps throughput (chunks are pipelined). It is C, not Python: the same single-
threaded loop in Python released chunks 26 us late at the median and 93 us at p90 on the
2-core development VM. It times each chunk from when it arrived at the socket and never
sends one before it is due, as netem would not: it arms its timer early by the lateness
its recent wake-ups showed and waits out the rest on the clock, so releases are at due
or a few us after however idle the machine is (relay.c says why and what it logs).

    argv(delay_ms, ["LISTEN_IP:PORT=TARGET_IP:PORT", ...])  -> the command to run
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from splitbench.errors import SplitbenchError
from splitbench.infra import files, procs

SOURCE = Path(__file__).with_name("relay.c")


class RelayBuildError(SplitbenchError):
    """No C compiler, or the relay did not compile."""


def binary() -> Path:
    """The compiled relay, built once per source version into the run's state
    directory (next to the run's other state; a few hundred ms with cc -O2)."""
    text = SOURCE.read_bytes()
    out = procs.state_dir() / "bin" / f"relay-{hashlib.sha256(text).hexdigest()[:12]}"
    if out.exists():
        return out
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise RelayBuildError("the delay relay needs a C compiler (cc or gcc; ./bootstrap.sh "
                              "installs one) where the kernel has no netem")
    with files.replacing(out) as tmp:  # whole or not at all: parallel jobs may build it
        result = subprocess.run([compiler, "-O2", "-o", str(tmp), str(SOURCE)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RelayBuildError(f"building the delay relay failed:\n"
                                  f"{result.stderr[-2000:]}")
    return out


def argv(delay_ms: float, mappings: list[str]) -> list[str]:
    """The relay's command line: delay in microseconds, then LISTEN=TARGET mappings."""
    return [str(binary()), f"{delay_ms * 1000:g}", *mappings]


# What relay.c's log says of each direction when it ends (see its report function).
_RELEASED = re.compile(r"earliest ([+-][\d.]+) us from due; \d+ released by the timer, "
                       r"([+-][\d.]+) us from due on average .*, ([+-][\d.]+) without "
                       r"arming it early")


def released_from_due(log: Path) -> list[tuple[float, float, float]]:
    """Per direction, from a relay's log: the earliest any chunk left, the mean its
    timer's releases left and the mean they would have left without the early arming,
    in us from due."""
    return [(float(earliest), float(mean), float(unarmed))
            for earliest, mean, unarmed in _RELEASED.findall(log.read_text())]
