"""The few commands that need root on a host (a link's address and MTU, the firewall
guard, the wake-up latency request): run as they are where the login user is root,
else through `sudo -n` with the tool's full path, which one sudoers line allows
exactly (the doctor prints it). Nothing else splitbench runs on a host needs root: the
worker, iperf3, sockperf, the probe and vLLM's ranks run as the login user.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from splitbench.errors import SplitbenchError
from splitbench.infra.hosts import Host

# Where system tools live: an ordinary user's PATH (over SSH too) often lacks the sbin
# directories, where Debian puts nft.
SYSTEM_PATH = "/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin"
# The privileged tools, by what needs them; a command with its arguments where sudoers
# allows only those (tee only ever writes the wake-up latency request).
FOR_ADDRESSES, FOR_GUARD = "ip", "nft"
FOR_WAKEUP = "tee /dev/cpu_dma_latency"


class PrivilegeError(SplitbenchError):
    """A command needs root on a host, and neither root nor sudo -n allows it."""


@functools.lru_cache(maxsize=64)
def is_root(host: Host) -> bool:
    return host.is_root()


@functools.lru_cache(maxsize=64)
def tool_path(host: Host, tool: str) -> str | None:
    """The tool's full path on the host, looked up in the system's directories as well
    as the login's PATH."""
    found = host.run(["sh", "-c", 'PATH="$PATH:$1" command -v "$2"', "sh", SYSTEM_PATH,
                      tool], check=False)
    path = found.stdout.strip()
    return path if found.returncode == 0 and path.startswith("/") else None


def login_user(host: Host) -> str:
    return host.run(["id", "-un"]).stdout.strip()


@functools.lru_cache(maxsize=64)
def login_uid(host: Host) -> int:
    """The uid splitbench's processes run as on the host."""
    return int(host.run(["id", "-u"]).stdout.strip())


def sudo_allows(host: Host, command: str) -> bool:
    """Whether `sudo -n` runs the tool (with the arguments `command` gives it, where it
    gives any) as root for the login user, without a password."""
    tool, *arguments = command.split()
    path = tool_path(host, tool)
    if path is None or tool_path(host, "sudo") is None:
        return False
    return host.run(["sudo", "-n", "-l", path, *arguments], check=False).returncode == 0


def can(host: Host, tool: str) -> bool:
    """Whether splitbench may run the tool as root on the host (root, or sudo -n)."""
    return is_root(host) or sudo_allows(host, tool)


def as_root(host: Host, argv: Sequence[str]) -> list[str]:
    """argv as root on the host: as it is for a root login, else through sudo -n."""
    if is_root(host):
        return list(argv)
    path = tool_path(host, argv[0])
    if path is None:
        raise PrivilegeError(f"host {host.name} has no {argv[0]}")
    return ["sudo", "-n", path, *argv[1:]]


def sudoers_line(host: Host, commands: Sequence[str]) -> str:
    """The line that allows the login user exactly these tools (with their arguments,
    where a command gives them) as root, no password."""
    paths = [" ".join([tool_path(host, tool) or f"/usr/sbin/{tool}", *arguments])
             for tool, *arguments in (command.split() for command in commands)]
    return f"{login_user(host)} ALL=(root) NOPASSWD: {', '.join(paths)}"
