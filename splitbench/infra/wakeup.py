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
on each host, or the root helper's `wakeup` (or `tee /dev/cpu_dma_latency`) through
sudo -n (host A's too, where splitbench runs as an ordinary user); where it cannot be
held, the rows say so (`wakeup_latency_{a,b}`).
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
from splitbench.remote import root_helper

DEVICE, HELD = root_helper.DEVICE, root_helper.HELD  # the helper holds it the same way
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


def _through_sudo(host: Host) -> bool:
    """The login user is not root on the host, and sudoers lets it hold the request."""
    from splitbench.infra import privilege

    return not privilege.is_root(host) and (privilege.through_helper(host) or privilege.
                                            sudo_allows(host, privilege.FOR_WAKEUP))


def _tee_through_sudo(host: Host) -> Any:
    """The root helper's `wakeup` through sudo -n on the host, or `tee
    /dev/cpu_dma_latency` where sudoers allows that instead (a channel on an SSH host's
    connection, a child process here; Popen-like): it writes the request, 0, and holds
    the file open while its input is; nothing else runs as root. The helper answers
    HELD; tee echoes the "0" it wrote."""
    from splitbench.infra import privilege

    argv = (["sudo", "-n", privilege.HELPER, "wakeup"] if privilege.through_helper(host)
            else ["sudo", "-n", privilege.tool_path(host, "tee") or "tee", DEVICE])
    if host.remote:
        process = host.popen(argv, stdin=True, stdout=subprocess.PIPE)
    else:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
    process.stdin.write("0\n")  # tee echoes it once the request is written
    if not host.remote:
        process.stdin.flush()
    return process


def _hold_process(host: Host) -> tuple[Any | None, str]:
    """The holder as a process of its own, or None: through sudo -n where the login
    user is not root (`_tee_through_sudo`); else, on an SSH host, Python as its root
    login."""
    through_sudo = _through_sudo(host)
    try:
        if through_sudo:
            process = _tee_through_sudo(host)
        else:
            process = host.popen([host.python, "-c", REMOTE_HOLDER], stdin=True,
                                 stdout=subprocess.PIPE)
    except (HostError, OSError) as exc:
        return None, f"not held: {str(exc)[-200:]}"
    # The answer, or none after ANSWER_TIMEOUT_S (a stalled SSH must not stall the cell).
    ready, _, _ = select.select([process.stdout], [], [], ANSWER_TIMEOUT_S)
    answer = process.stdout.readline().strip() if ready else ""
    if through_sudo and answer != HELD:
        answer = HELD if answer == "0" else f"not held: sudo gave no answer ({answer})"
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
    holders: list[Any] = []  # processes that hold it (B's, or A's through sudo)
    try:
        for side, host in hosts.items():
            machine = machine_of[side]
            if machine in states:
                continue
            if host.remote or _through_sudo(host):
                process, states[machine] = _hold_process(host)
                if process is not None:
                    holders.append(process)
            else:
                local_fd, states[machine] = _hold_here()
        yield {f"wakeup_latency_{side}": states[machine_of[side]] for side in hosts}
    finally:
        if local_fd is not None:
            os.close(local_fd)
        for process in holders:
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
