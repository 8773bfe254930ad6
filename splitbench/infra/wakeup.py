"""Idle CPUs that wake up in microseconds while a measurement runs.

A decode step over RPC is a chain of wake-ups: llama-server sends, the worker wakes,
computes, answers, llama-server wakes. An idle CPU that has gone to sleep takes long to
wake, so a decode step can be faster beside busy loops than on a quiet machine
(docs/method.md has the figures): a benchmark whose figures improve under load measures
the idle states, not the link.

Holding the kernel's CPU wake-up latency request (PM QoS, /dev/cpu_dma_latency) at 0 us
while measuring keeps idle CPUs in their shallowest state (polling), as latency
benchmarks (cyclictest, tuned's latency-performance profile) do. The request holds
while the file stays open and ends when it is closed or its process dies. It needs root
on each host; where it cannot be held, the rows say so (`wakeup_latency_{a,b}`).
"""

from __future__ import annotations

import contextlib
import os
import select
import struct
import subprocess
from collections.abc import Iterator, Mapping
from typing import Any

from splitbench.infra.hosts import Host, HostError

DEVICE = "/dev/cpu_dma_latency"
HELD = "held at 0 us"
ANSWER_TIMEOUT_S = 30
# Run on a remote host: hold the request until our end of the SSH channel closes stdin.
REMOTE_HOLDER = (
    "import os, struct, sys\n"
    f"try:\n    fd = os.open({DEVICE!r}, os.O_WRONLY)\n"
    "    os.write(fd, struct.pack('i', 0))\n"
    f"    print({HELD!r}, flush=True)\n"
    "except OSError as exc:\n"
    "    print(f'not held: {exc.strerror}', flush=True)\n"
    "sys.stdin.read()\n"
)


def _hold_here() -> tuple[int | None, str]:
    try:
        fd = os.open(DEVICE, os.O_WRONLY)
    except OSError as exc:
        return None, f"not held: {DEVICE}: {exc.strerror}"
    try:
        os.write(fd, struct.pack("i", 0))
    except OSError as exc:
        os.close(fd)
        return None, f"not held: {DEVICE}: {exc.strerror}"
    return fd, HELD


def _hold_remote(host: Host) -> tuple[Any | None, str]:
    """The holder on an SSH host (a channel on its connection; Popen-like), or None:
    Python as the login user where it is root; else, where sudoers allows it, `tee
    /dev/cpu_dma_latency` through sudo -n (it writes the request, "0" in hex, and holds
    the file open while its input is), and nothing else runs as root."""
    from splitbench.infra import privilege

    through_sudo = not privilege.is_root(host) and privilege.sudo_allows(
        host, privilege.FOR_WAKEUP)
    try:
        if through_sudo:
            tee = privilege.tool_path(host, "tee") or "tee"
            process = host.popen(["sudo", "-n", tee, DEVICE], stdin=True,
                                 stdout=subprocess.PIPE)
            process.stdin.write("0\n")  # tee echoes it once the request is written
        else:
            process = host.popen([host.python, "-c", REMOTE_HOLDER], stdin=True,
                                 stdout=subprocess.PIPE)
    except HostError as exc:
        return None, f"not held: {str(exc)[-200:]}"
    # The answer, or none after ANSWER_TIMEOUT_S (a stalled SSH must not stall the cell).
    ready, _, _ = select.select([process.stdout], [], [], ANSWER_TIMEOUT_S)
    answer = process.stdout.readline().strip() if ready else ""
    if through_sudo:
        answer = HELD if answer == "0" else "not held: sudo tee gave no answer"
    if answer != HELD:
        process.kill()
        process.wait()
        process.stdout.close()
        return None, answer or f"not held: no answer from host {host.name}"
    return process, HELD


@contextlib.contextmanager
def low_latency(hosts: Mapping[str, Host]) -> Iterator[dict[str, str]]:
    """Hold each machine's wake-up latency at 0 us for the block; yields, per host side,
    `wakeup_latency_{side}`: whether it was held, and why not."""
    machine_of = {side: host.ssh or "local" for side, host in hosts.items()}
    states: dict[str, str] = {}
    local_fd: int | None = None
    remotes: list[Any] = []
    try:
        for side, host in hosts.items():
            machine = machine_of[side]
            if machine in states:
                continue
            if host.remote:
                process, states[machine] = _hold_remote(host)
                if process is not None:
                    remotes.append(process)
            else:
                local_fd, states[machine] = _hold_here()
        yield {f"wakeup_latency_{side}": states[machine_of[side]] for side in hosts}
    finally:
        if local_fd is not None:
            os.close(local_fd)
        for process in remotes:
            with contextlib.suppress(OSError):
                process.stdin.close()  # the holder ends, and with it the request
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            process.stdout.close()


def during(settings: Mapping[str, object], hosts: Mapping[str, Host]) -> Any:
    """`low_latency(hosts)` when a measuring job's settings hold wake-up latency
    (`hold_wakeup_latency`, the default); otherwise says, per side, that it was not."""
    if settings.get("hold_wakeup_latency", True):
        return low_latency(hosts)
    return contextlib.nullcontext({f"wakeup_latency_{side}": "not held (config)"
                                   for side in hosts})
