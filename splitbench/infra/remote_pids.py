"""A recorded process on another host, by its pid: commands over this process's own
connection to that host, the process's start time (which tells it from another that
took its pid since), and a signal sent only while the pid is still that process."""

from __future__ import annotations

import shlex
import signal as signals
import subprocess
from typing import TYPE_CHECKING

from splitbench.errors import SplitbenchError

if TYPE_CHECKING:
    from splitbench.infra.ssh import SSHSettings

# The check (the start time, field 22 of the process's stat) and the kill in one
# command on the host, so that no other process can take the pid between the two.
# $1 pid, $2 start time, $3 signal, $4 target (the pid, or -pid for its group).
KILL_IF_SAME = ('p=$1 st=$2 sig=$3 tg=$4; s=$(cat "/proc/$p/stat" 2>/dev/null) || exit 0; '
                'set -- ${s##*)}; [ "${20}" = "$st" ] || exit 0; kill -s "$sig" -- "$tg"')


class HostUnreachable(SplitbenchError):
    """A remote process's host stopped answering while the process was being stopped:
    whether it still runs cannot be told, so its record is kept."""


def remote_run(remote: SSHSettings | list[str],
               argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    """argv on a recorded process's host, over this process's own connection to it (a
    teardown may run in another process than the one that started it); None when the
    host cannot be reached."""
    if isinstance(remote, list):  # a record from before the paramiko transport: ssh argv
        return subprocess.run([*remote, shlex.join(argv)], capture_output=True, text=True,
                              timeout=30)
    from splitbench.infra import ssh  # paramiko loads only where a host is remote

    try:
        return ssh.run(remote, argv, timeout=30)
    except ssh.SSHError:
        return None


def start_time(remote: SSHSettings | list[str], pid: int, *,
               strict: bool = False) -> int | None:
    """A remote process's start time, None when it is gone, a zombie, or its host cannot
    be reached (strict: HostUnreachable then). remote: the host's connection settings
    (Host.ssh_settings())."""
    result = remote_run(remote, ["cat", f"/proc/{int(pid)}/stat"])
    if result is None and strict:
        raise HostUnreachable(f"lost the connection to the host of pid {int(pid)}")
    if result is None or result.returncode != 0 or ")" not in result.stdout:
        return None
    fields = result.stdout.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])


def signal(remote: SSHSettings | list[str], pid: int, started: int | None,
           sig: signals.Signals, group: bool) -> None:
    """`sig` to the remote process (its group with `group`) only while `pid` is still
    the process that started at `started` (KILL_IF_SAME); one whose start time was
    never read is never signalled. HostUnreachable: its host did not answer."""
    if started is None:
        return
    target = f"-{pid}" if group else str(pid)
    if remote_run(remote, ["sh", "-c", KILL_IF_SAME, "sh", str(pid), str(started),
                           sig.name.removeprefix("SIG"), target]) is None:
        raise HostUnreachable(f"lost the connection to the host of pid {pid}")
