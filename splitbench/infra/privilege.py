"""The few things that need root on a host (a link's address, state and MTU, the
firewall guard, the wake-up latency request), each a verb of the root helper
(remote/root_helper.py): through `sudo -n` and the helper, installed root-owned at
HELPER, which the one sudoers line names alone (the doctor prints it and how to install
the helper); as the verb's own command where the login user is root; or, where an
older sudoers line allows `ip`, `nft` and `tee` themselves, through sudo for those (it
works, and the doctor calls it what it is: root-equivalent). Nothing else splitbench
runs on a host needs root: the worker, iperf3, sockperf, the probe and vLLM's ranks run
as the login user.
"""

from __future__ import annotations

import functools
import hashlib
import shlex
from collections.abc import Sequence
from pathlib import Path

from splitbench.errors import SplitbenchError
from splitbench.infra.hosts import Host, HostError
from splitbench.remote import root_helper

# Where system tools live, the only places a tool run as root is looked for (a user's
# PATH may hold a ~/bin/nft of its own).
SYSTEM_PATH = "/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin"
# The root helper where the doctor says to install it, root-owned.
HELPER = "/usr/local/sbin/splitbench-root"
# The first file of `$1` in $2's directories that root owns and only root may write.
_SYSTEM_TOOL = r"""IFS=:; for d in $2; do f="$d/$1"
  [ -f "$f" ] && [ -x "$f" ] && [ -n "$(find -L "$f" -maxdepth 0 -user 0 ! -perm /022)" ] \
    && { echo "$f"; exit 0; }
done; exit 1
"""
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
    """The tool's full path on the host: in the system's directories only, a file root
    owns and only root may write (None where there is none)."""
    found = host.run(["sh", "-c", _SYSTEM_TOOL, "sh", tool, SYSTEM_PATH], check=False)
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


def helper_version() -> str:
    """The sha256 of this splitbench's root helper: what the installed one must say."""
    return hashlib.sha256(Path(root_helper.__file__).read_bytes()).hexdigest()


@functools.lru_cache(maxsize=64)
def helper_state(host: Host) -> str | None:
    """"ready": sudo -n runs the installed helper, and it is this splitbench's;
    "outdated": it runs one of another version; None: none installed, or sudo does
    not run it for the login user (or the login user is root)."""
    if is_root(host) or tool_path(host, "sudo") is None:
        return None
    if host.run(["sudo", "-n", "-l", HELPER], check=False).returncode != 0:
        return None
    said = host.run(["sudo", "-n", HELPER, "version"], check=False).stdout.strip()
    return "ready" if said == helper_version() else "outdated"


def through_helper(host: Host) -> bool:
    return helper_state(host) == "ready"


def can(host: Host, tool: str) -> bool:
    """Whether splitbench may do, as root on the host, what the tool stands for (root,
    the helper, or sudo -n for the tool itself)."""
    return is_root(host) or through_helper(host) or sudo_allows(host, tool)


def root_command(host: Host, verb: str, *args: str) -> list[str]:
    """A helper verb as the argv that does it on the host: the helper through sudo -n
    where it is installed, else the verb's one command as root (`as_root`)."""
    if through_helper(host):
        return ["sudo", "-n", HELPER, verb, *args]
    try:
        argv = root_helper.plain(verb, list(args), login_uid(host))
    except root_helper.Refused as refused:
        raise PrivilegeError(f"host {host.name}: {refused}") from None
    return as_root(host, argv)


def as_root(host: Host, argv: Sequence[str]) -> list[str]:
    """argv as root on the host: as it is for a root login, else through sudo -n."""
    if is_root(host):
        return list(argv)
    path = tool_path(host, argv[0])
    if path is None:
        raise PrivilegeError(f"host {host.name} has no {argv[0]}")
    return ["sudo", "-n", path, *argv[1:]]


def helper_line(host: Host) -> str:
    """The sudoers line that allows the login user the root helper alone, no password."""
    return f"{login_user(host)} ALL=(root) NOPASSWD: {HELPER}"


def helper_install(host: Host) -> str:
    """The command that installs this splitbench's root helper on the host, for root to
    run there: from the checkout here, or from the copy this puts into the login user's
    ~/.cache/splitbench on another machine (a file of that user's: root copies it, owned
    by root, to HELPER; `discard_copy` removes it once installed). Where the copy cannot
    be put there, what to copy first."""
    source = Path(root_helper.__file__)
    if not host.remote:
        return f"install -o root -g root -m 0755 {shlex.quote(str(source))} {HELPER}"
    try:
        where = _copy_path(host)
        host.run(["mkdir", "-p", str(Path(where).parent)])
        host.put(source, where, mode=0o644)
    except HostError as exc:
        return (f"copy {source} from host A there (it could not be: {exc}), then install "
                f"-o root -g root -m 0755 <that copy> {HELPER}")
    return f"install -o root -g root -m 0755 {shlex.quote(where)} {HELPER}"


def discard_copy(host: Host) -> None:
    """Remove the helper's copy `helper_install` put on another machine (installed by
    now, or not wanted)."""
    if host.remote:
        host.run(["rm", "-f", _copy_path(host)], check=False)


def _copy_path(host: Host) -> str:
    home = host.run(["sh", "-c", 'printf %s "$HOME"']).stdout.strip()
    return f"{home}/.cache/splitbench/splitbench-root"
