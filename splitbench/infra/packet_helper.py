"""A packet socket for a host A where splitbench is not root: a small helper with
CAP_NET_RAW (packet_socket.c) opens it and hands it over.

The packet clock (each token's segment stamped as it arrives) and the RPC turn count
(round trips per token, counted from the packets) read a packet socket, which needs
CAP_NET_RAW. Rather than running splitbench as root, root installs the helper once:

    sudo .venv/bin/python -m splitbench packet-helper [--user NAME]

It is compiled into HELPER_DIR, owned by root, executable by NAME's group only (mode
0750: no other user may run it), and given cap_net_raw and cap_net_admin (the second
sizes the socket's buffer past net.core.rmem_max). Its file name carries its source's
hash, so a helper from another version of splitbench is never used. `open_socket` runs
it with one end of a Unix socket pair and receives the packet socket over it.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from splitbench.errors import SplitbenchError

SOURCE = Path(__file__).with_name("packet_socket.c")
HELPER_DIR = Path("/usr/local/libexec/splitbench")
CAPABILITIES = "cap_net_raw,cap_net_admin+ep"


class HelperError(SplitbenchError):
    """The helper could not be installed; the message says why and what to do."""


def path() -> Path:
    """Where this version's helper is installed."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    return HELPER_DIR / f"packet-socket-{digest}"


def open_socket(receive_buffer: int) -> socket.socket | None:
    """A packet socket from the helper (its filter keeps nothing until the caller's
    replaces it); None where there is no helper this user may run, or it failed."""
    helper = path()
    if not os.access(helper, os.X_OK):
        return None
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        try:
            done = subprocess.run([str(helper), str(theirs.fileno()), str(receive_buffer)],
                                  pass_fds=(theirs.fileno(),), capture_output=True,
                                  timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode != 0:
            return None
        ours.settimeout(5)
        try:
            _, fds, _, _ = socket.recv_fds(ours, 1, 1)
        except OSError:
            return None
    return socket.socket(fileno=fds[0]) if fds else None


def install(user: str) -> Path:
    """Compile the helper and install it for `user` (root only). Returns its path."""
    if os.geteuid() != 0:
        raise HelperError("installing the packet helper needs root: run it with sudo")
    try:
        group = grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name
    except KeyError as exc:
        raise HelperError(f"no user {user!r} on this machine (--user)") from exc
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    setcap = shutil.which("setcap") or next(
        (str(p) for p in (Path("/usr/sbin/setcap"), Path("/sbin/setcap")) if p.exists()), None)
    if compiler is None or setcap is None:
        missing = " and ".join(n for n, found in (("a C compiler (gcc)", compiler),
                                                   ("setcap (libcap2-bin)", setcap))
                               if found is None)
        raise HelperError(f"installing the packet helper needs {missing}: apt-get install "
                          "gcc libcap2-bin")
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(target.parent, 0o755)
    with tempfile.TemporaryDirectory() as work:
        built = Path(work) / "packet-socket"
        result = subprocess.run([compiler, "-O2", "-o", str(built), str(SOURCE)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise HelperError(f"compiling the packet helper failed:\n{result.stderr[-2000:]}")
        subprocess.run(["install", "-o", "root", "-g", group, "-m", "0750", str(built),
                        str(target)], check=True)
    given = subprocess.run([setcap, CAPABILITIES, str(target)], capture_output=True, text=True)
    if given.returncode != 0:
        target.unlink()
        raise HelperError(f"setcap {CAPABILITIES} {target} failed: {given.stderr.strip()} "
                          "(a file system without extended attributes?)")
    return target


def remove() -> list[Path]:
    """Take every installed version of the helper off (root only)."""
    if os.geteuid() != 0:
        raise HelperError("removing the packet helper needs root: run it with sudo")
    gone = sorted(HELPER_DIR.glob("packet-socket-*"))
    for helper in gone:
        helper.unlink()
    return gone
