"""Where a command runs: this machine, or a network namespace on it.

Commands are argument lists end to end; nothing is ever joined into a shell string.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from splitbench import procs

CLONE_NEWNET = 0x40000000


class HostError(RuntimeError):
    """A command on a host failed; the message names the host."""


@dataclass(frozen=True)
class Host:
    """A host of a pair. `netns` is None for this machine's own network stack."""

    name: str
    netns: str | None = None

    def wrap(self, argv: Sequence[str]) -> list[str]:
        if self.netns is None:
            return list(argv)
        return ["ip", "netns", "exec", self.netns, *argv]

    def run(
        self, argv: Sequence[str], *, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        try:
            result = subprocess.run(
                self.wrap(argv), capture_output=True, text=True, timeout=timeout
            )
        except FileNotFoundError as exc:
            raise HostError(f"host {self.name}: {argv[0]} not found") from exc
        except subprocess.TimeoutExpired as exc:
            raise HostError(f"host {self.name}: {argv[0]} timed out after {timeout}s") from exc
        if check and result.returncode != 0:
            raise HostError(
                f"host {self.name}: {' '.join(argv[:3])} failed "
                f"(exit {result.returncode}): {result.stderr.strip()[-500:]}"
            )
        return result

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Run the calling thread (and threads it starts) in this host's network stack.

        Sockets opened inside reach the host's link and loopback as the host's own
        programs would: the benchmark client then sits on host A, like a real user's.
        """
        if self.netns is None:
            yield
            return
        libc = ctypes.CDLL(None, use_errno=True)
        with open("/proc/thread-self/ns/net") as home, open(f"/run/netns/{self.netns}") as ns:
            if libc.setns(ns.fileno(), CLONE_NEWNET) != 0:
                raise HostError(f"host {self.name}: setns failed: "
                                f"{os.strerror(ctypes.get_errno())}")
            try:
                yield
            finally:
                libc.setns(home.fileno(), CLONE_NEWNET)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        role: str,
        key: str,
        log_path: Path,
        env: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Start a long-lived process on this host, recorded for teardown."""
        return procs.spawn(
            self.wrap(argv),
            role=role,
            key=key,
            log_path=log_path,
            env=env,
            extra={"host": self.name, **(extra or {})},
        )
