"""A packet socket for a host A where splitbench is not root: a small helper with
CAP_NET_RAW (packet_socket.c) opens it, filtered, and hands it over.

The packet clock (each token's segment stamped as it arrives) and the RPC turn count
(round trips per token, counted from the packets) read a packet socket, which needs
CAP_NET_RAW. Rather than running splitbench as root, root installs the helper once, for
the user who runs splitbench: `python -m splitbench packet-helper --user NAME` prints the
commands (root reads the C source, copies it root-owned, compiles that copy, gives the
program cap_net_raw and the group GROUP, and puts the user in that group); run as root,
the same command does them.

What the socket shows is the helper's to decide, not the caller's: the helper puts its own
check before the caller's filter (IPv4 TCP with a port of splitbench's blocks,
infra/port_blocks.py) and locks the filter, so that a user it serves sees the first bytes
of segments on those ports and nothing else. Its file name carries its source's hash and
the port range, so a helper of another version of splitbench is never used.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from splitbench.errors import SplitbenchError
from splitbench.infra.port_blocks import FIRST_PORT, LAST_PORT

SOURCE = Path(__file__).with_name("packet_socket.c")
HELPER_DIR = Path("/usr/local/libexec/splitbench")
CAPABILITIES = "cap_net_raw+ep"
GROUP = "splitbench-packets"
PORT_DEFINES = (f"-DFIRST_PORT={FIRST_PORT}", f"-DLAST_PORT={LAST_PORT}")


class HelperError(SplitbenchError):
    """The helper could not be installed; the message says why and what to do."""


def path(source: Path = SOURCE) -> Path:
    """Where this version's helper is installed: named by its source's hash and ports."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    return HELPER_DIR / f"packet-socket-{digest}-{FIRST_PORT}-{LAST_PORT}"


def open_socket(program: bytes, receive_buffer: int) -> socket.socket | None:
    """A packet socket from the helper, filtered by its own check and then `program` (a
    classic BPF filter), the filter locked, its buffer up to `receive_buffer` (the
    kernel caps it at net.core.rmem_max); None where there is no helper this user may
    run, or it failed."""
    helper = path()
    if not os.access(helper, os.X_OK):
        return None
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        try:
            done = subprocess.run([str(helper), str(theirs.fileno()), str(receive_buffer),
                                   program.hex()],
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


def install_commands(user: str) -> list[str]:
    """The commands root runs to install this version's helper for `user`, from a
    root-owned copy of the source (read it first: it is short)."""
    target = path()
    copy = HELPER_DIR / SOURCE.name
    q = shlex.quote
    return [
        f"install -d -o root -g root -m 0755 {HELPER_DIR}",
        f"install -o root -g root -m 0644 {q(str(SOURCE))} {copy}",
        f"sha256sum {copy}  # must begin {target.name.split('-')[2]}",
        f"getent group {GROUP} >/dev/null || groupadd --system {GROUP}",
        f"usermod -a -G {GROUP} {q(user)}",
        f"cc -O2 {' '.join(PORT_DEFINES)} -o {target}.new {copy}",
        f"chown root:{GROUP} {target}.new && chmod 0750 {target}.new",
        f"setcap {CAPABILITIES} {target}.new && mv {target}.new {target}",
    ]


def install(user: str) -> Path:
    """Install the helper for `user` as install_commands says (root only): the source
    copied root-owned before it is hashed and compiled, so the bytes compiled are the
    bytes named. Returns its path."""
    if os.geteuid() != 0:
        raise HelperError("installing the packet helper needs root: run as root the "
                          "commands `python -m splitbench packet-helper` prints")
    try:
        pwd.getpwnam(user)
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
    _group_with(user)
    HELPER_DIR.mkdir(parents=True, exist_ok=True)
    os.chmod(HELPER_DIR, 0o755)
    with tempfile.TemporaryDirectory() as work:  # root's, mode 0700
        copy = Path(work) / SOURCE.name
        shutil.copyfile(SOURCE, copy)
        target = path(copy)
        built = Path(work) / "packet-socket"
        result = subprocess.run([compiler, "-O2", *PORT_DEFINES, "-o", str(built), str(copy)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise HelperError(f"compiling the packet helper failed:\n{result.stderr[-2000:]}")
        subprocess.run(["install", "-o", "root", "-g", GROUP, "-m", "0750", str(built),
                        str(target)], check=True)
    given = subprocess.run([setcap, CAPABILITIES, str(target)], capture_output=True, text=True)
    if given.returncode != 0:
        target.unlink()
        raise HelperError(f"setcap {CAPABILITIES} {target} failed: {given.stderr.strip()} "
                          "(a file system without extended attributes?)")
    return target


def _group_with(user: str) -> None:
    """GROUP, made if missing, with `user` in it (a login after this has the group)."""
    try:
        members = grp.getgrnam(GROUP).gr_mem
    except KeyError:
        subprocess.run(["groupadd", "--system", GROUP], check=True, capture_output=True)
        members = []
    if user not in members:
        subprocess.run(["usermod", "-a", "-G", GROUP, user], check=True, capture_output=True)


def remove() -> list[Path]:
    """Take every installed version of the helper off (root only); the group stays."""
    if os.geteuid() != 0:
        raise HelperError("removing the packet helper needs root: run it with sudo")
    gone = sorted(HELPER_DIR.glob("packet-socket-*"))
    for helper in gone:
        helper.unlink()
    (HELPER_DIR / SOURCE.name).unlink(missing_ok=True)
    return gone
