"""SSH to a remote host with paramiko: one connection per host per process, reused.

A host's connection settings are its config block's keys (`ssh`: [user@]destination,
`ssh_port`, `identity`, `known_hosts`), a JSON-able dict: process records store it, so a
teardown in another process (the reaper) reaches the same host through this module. What
the block does not set comes from ~/.ssh/config (HostName, User, Port, IdentityFile,
UserKnownHostsFile, ProxyJump); the block's keys win.

Host keys are verified against known_hosts (the block's `known_hosts`, else the config's
UserKnownHostsFile, else ~/.ssh/known_hosts): an unknown or changed key is refused, never
added, and the error says which. Jump hosts are verified the same way. Authentication is
by key only (the `identity` file, else the config's IdentityFile, else the agent and
~/.ssh/id_*); nothing ever prompts and no password is tried.

Commands are argument lists: the remote command line is `shlex.join(argv)`, handed to
/bin/sh as one single-quoted argument (`remote_command`), so a login shell other than a
POSIX one (fish, say) only starts sh and never reads the command's own syntax.
"""

from __future__ import annotations

import atexit
import getpass
import os
import select
import shlex
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import paramiko

from splitbench.infra.ssh_errors import CommandTimeout, SSHError
from splitbench.infra.ssh_process import RemoteProcess

CONFIG_PATH = "~/.ssh/config"
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
CONNECT_TIMEOUT_S = 10.0
KEEPALIVE_S = 15
MAX_JUMPS = 8
# The keys of a host block that say how to reach it (the rest is not the connection's).
SETTINGS_KEYS = ("ssh", "ssh_port", "identity", "known_hosts")
# How much of each stream `run` keeps (its end), so that a host that prints without end
# cannot fill this machine's memory: far above any command's output here (the largest,
# a remote log's kept tail, is procs.REMOTE_LOG_KEPT_BYTES, 256 KiB).
OUTPUT_KEPT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Target:
    """Where a connection goes, resolved from a host's settings and ~/.ssh/config. Two
    hosts with equal targets share one connection."""

    hostname: str
    port: int
    user: str
    identities: tuple[str, ...] = ()  # key files; none: the agent and ~/.ssh/id_*
    identities_only: bool = False  # the block's `identity`: that key and nothing else
    known_hosts: tuple[str, ...] = ()
    jump: Target | None = None

    def __str__(self) -> str:
        where = f"{self.user}@{self.hostname}" + (f":{self.port}" if self.port != 22 else "")
        return where + (f" via {self.jump}" if self.jump else "")

    @property
    def known_name(self) -> str:
        """The name known_hosts holds this host's key under."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


# --- settings and ~/.ssh/config -------------------------------------------------------
class SSHSettings(TypedDict):
    """How to reach a host (`settings`), as process records keep it; None: not set."""

    ssh: str | None
    ssh_port: int | None
    identity: str | None
    known_hosts: str | None


def settings(spec: Mapping[str, Any]) -> SSHSettings:
    """A host block's connection settings, key files made absolute (a record is read by
    other processes, possibly elsewhere)."""
    out = {key: spec.get(key) for key in SETTINGS_KEYS}
    for key in ("identity", "known_hosts"):
        if out[key]:
            out[key] = str(Path(out[key]).expanduser().absolute())
    return out


_configs: dict[str, tuple[int, paramiko.SSHConfig]] = {}


def load_config(path: str = CONFIG_PATH) -> paramiko.SSHConfig:
    """~/.ssh/config as paramiko reads it (empty when there is none); re-read on change."""
    full = os.path.expanduser(path)
    try:
        mtime = os.stat(full).st_mtime_ns
    except OSError:
        return paramiko.SSHConfig()
    cached = _configs.get(full)
    if cached and cached[0] == mtime:
        return cached[1]
    try:
        config = paramiko.SSHConfig.from_path(full)
    except (OSError, ValueError, paramiko.SSHException) as exc:
        raise SSHError(f"cannot read {full}: {exc}") from exc
    _configs[full] = (mtime, config)
    return config


def resolve(spec: Mapping[str, Any], config: paramiko.SSHConfig | None = None) -> Target:
    """The connection a host's settings describe; ~/.ssh/config fills what they leave out."""
    if not spec.get("ssh"):
        raise SSHError("no ssh destination")
    config = load_config() if config is None else config
    known = (str(Path(spec["known_hosts"]).expanduser()),) if spec.get("known_hosts") else ()
    identity = str(Path(spec["identity"]).expanduser()) if spec.get("identity") else None
    return _resolve(spec["ssh"], config, port=spec.get("ssh_port"), identity=identity,
                    known_hosts=known, depth=0)


def _resolve(destination: str, config: paramiko.SSHConfig, *, port: int | None = None,
             identity: str | None = None, known_hosts: tuple[str, ...] = (),
             fallback_identities: tuple[str, ...] = (), via: Target | None = None,
             depth: int) -> Target:
    if depth > MAX_JUMPS:
        raise SSHError(f"ProxyJump: more than {MAX_JUMPS} jumps to {destination} (a loop?)")
    user, _, alias = destination.rpartition("@")
    try:
        entry = config.lookup(alias)
    except Exception as exc:  # Match exec, canonicalisation: whatever the config runs
        raise SSHError(f"~/.ssh/config: cannot look up {alias}: {exc}") from exc
    try:
        port = int(port or entry.get("port", 22))
    except ValueError as exc:
        raise SSHError(f"~/.ssh/config: Port of {alias} is not a number") from exc
    if identity:
        identities, only = (identity,), True
    else:
        found = tuple(os.path.expanduser(p) for p in entry.get("identityfile", ()))
        identities, only = found or fallback_identities, False
    if not known_hosts:
        files = entry.get("userknownhostsfile", "").split()
        known_hosts = tuple(os.path.expanduser(f) for f in files if f.lower() != "none") \
            or (os.path.expanduser(DEFAULT_KNOWN_HOSTS),)
    jump = via
    proxy = entry.get("proxyjump", "")
    if via is None and proxy and proxy.lower() != "none":
        for hop in proxy.split(","):
            hop_user, hop_host, hop_port = parse_jump(hop)
            jump = _resolve(f"{hop_user}@{hop_host}" if hop_user else hop_host, config,
                            port=hop_port, known_hosts=known_hosts,
                            fallback_identities=identities, via=jump, depth=depth + 1)
    return Target(hostname=entry.get("hostname", alias),
                  port=port, user=user or entry.get("user") or getpass.getuser(),
                  identities=identities, identities_only=only, known_hosts=known_hosts,
                  jump=jump)


def parse_jump(hop: str) -> tuple[str | None, str, int | None]:
    """One ProxyJump hop, `[user@]host[:port]` (or `ssh://[user@]host[:port]`; an IPv6
    address in brackets): (user, host, port)."""
    hop = hop.strip().removeprefix("ssh://")
    user, _, rest = hop.rpartition("@")
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port = tail.removeprefix(":") or None
    elif rest.count(":") == 1:
        host, _, port = rest.partition(":")
    else:
        host, port = rest, None
    if not host:
        raise SSHError(f"ProxyJump: cannot read hop {hop!r}")
    try:
        return user or None, host, int(port) if port else None
    except ValueError as exc:
        raise SSHError(f"ProxyJump: bad port in hop {hop!r}") from exc


# --- host keys ------------------------------------------------------------------------
class UnknownHostKey(paramiko.SSHException):
    def __init__(self, name: str, key: paramiko.PKey) -> None:
        super().__init__(f"{name} not found in known_hosts")
        self.name, self.key = name, key


class _Refuse(paramiko.RejectPolicy):
    """RejectPolicy that keeps the offered key for the error message."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        raise UnknownHostKey(hostname, key)


def unknown_key_message(target: Target, key: paramiko.PKey) -> str:
    port = f" -p {target.port}" if target.port != 22 else ""
    return (f"host key unknown: {target.known_name} offered {key.get_name()} "
            f"{key.fingerprint}, which is not in known_hosts "
            f"({', '.join(target.known_hosts)}); refused. Check that fingerprint on the "
            f"host (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), then add its key "
            f"(ssh-keyscan{port} {target.hostname} >> {target.known_hosts[0]})")


def changed_key_message(target: Target, offered: paramiko.PKey,
                        expected: paramiko.PKey) -> str:
    return (f"host key changed: {target.known_name} offered {offered.get_name()} "
            f"{offered.fingerprint}, but known_hosts ({', '.join(target.known_hosts)}) "
            f"holds {expected.get_name()} {expected.fingerprint} for it; refused (someone "
            "may be in the middle; if the host was reinstalled, replace its line)")


# --- connections: one per target per process -----------------------------------------
_lock = threading.RLock()
_clients: dict[Target, paramiko.SSHClient] = {}
_owner = os.getpid()
opened = 0  # connections this process has made (tests read it)


def client(spec: Mapping[str, Any]) -> paramiko.SSHClient:
    """This process's connection to the host (made on first use, reused after)."""
    return _client(resolve(spec))


def _client(target: Target, *, fresh: bool = False) -> paramiko.SSHClient:
    global _owner
    with _lock:
        if _owner != os.getpid():  # a forked child: the parent's connections are not ours
            _clients.clear()
            _owner = os.getpid()
        cached = _clients.get(target)
        if cached is not None:
            transport = cached.get_transport()
            if not fresh and transport is not None and transport.is_active():
                return cached
            cached.close()
            del _clients[target]
        made = _connect(target)
        _clients[target] = made
        return made


def _connect(target: Target) -> paramiko.SSHClient:
    global opened
    sock = None
    if target.jump is not None:
        try:
            through = _client(target.jump).get_transport()
            assert through is not None
            sock = through.open_channel("direct-tcpip", (target.hostname, target.port),
                                        ("127.0.0.1", 0), timeout=CONNECT_TIMEOUT_S)
        except SSHError as exc:
            raise SSHError(f"jump host {target.jump}: {exc}") from exc
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise SSHError(f"jump host {target.jump} cannot reach {target.hostname}:"
                           f"{target.port}: {exc or type(exc).__name__}") from exc
    made = paramiko.SSHClient()
    keys = made.get_host_keys()
    for path in target.known_hosts:
        try:
            keys.load(path)
        except FileNotFoundError:
            continue  # no such file: its keys are unknown, and so refused
        except (OSError, UnicodeDecodeError) as exc:
            raise SSHError(f"cannot read known_hosts {path}: {exc}") from exc
    made.set_missing_host_key_policy(_Refuse())
    try:
        made.connect(target.hostname, target.port, username=target.user,
                     key_filename=list(target.identities) or None,
                     allow_agent=not target.identities_only,
                     look_for_keys=not target.identities, password=None,
                     timeout=CONNECT_TIMEOUT_S, banner_timeout=CONNECT_TIMEOUT_S,
                     auth_timeout=CONNECT_TIMEOUT_S, channel_timeout=CONNECT_TIMEOUT_S,
                     sock=sock)
    except UnknownHostKey as exc:
        raise SSHError(unknown_key_message(target, exc.key)) from exc
    except paramiko.BadHostKeyException as exc:
        raise SSHError(changed_key_message(target, exc.key, exc.expected_key)) from exc
    except paramiko.AuthenticationException as exc:
        keys_tried = ", ".join(target.identities) or "the agent's and ~/.ssh/id_*"
        raise SSHError(f"{target.user}@{target.hostname} refused our keys ({keys_tried}): "
                       f"{exc}") from exc
    except paramiko.SSHException as exc:
        if str(exc).startswith("No authentication methods"):
            raise SSHError(f"no key to log in to {target.user}@{target.hostname} with (no "
                           "identity, no IdentityFile in ~/.ssh/config, no agent, no "
                           "~/.ssh/id_*); passwords are never tried") from exc
        raise SSHError(f"cannot connect to {target}: {exc or type(exc).__name__}") from exc
    except (OSError, EOFError) as exc:
        raise SSHError(f"cannot connect to {target}: {exc or type(exc).__name__}") from exc
    finally:
        if made.get_transport() is None or not made.get_transport().is_authenticated():
            made.close()
            if sock is not None:
                sock.close()
    transport = made.get_transport()
    assert transport is not None
    transport.set_keepalive(KEEPALIVE_S)
    opened += 1
    return made


def _session(target: Target) -> paramiko.Channel:
    """A new session channel on the target's connection; one reconnect if the connection
    is dead or does not answer (a host that refuses the session keeps its connection:
    other channels may be running on it)."""
    for attempt in (0, 1):
        transport = _client(target, fresh=attempt == 1).get_transport()
        try:
            assert transport is not None
            return transport.open_session(timeout=CONNECT_TIMEOUT_S)
        except paramiko.ChannelException as exc:
            raise SSHError(f"{target} refused a session: {exc}") from exc
        except (paramiko.SSHException, OSError, EOFError, AssertionError) as exc:
            if attempt:
                raise SSHError(f"cannot open a session on {target}: "
                               f"{exc or type(exc).__name__}") from exc
    raise AssertionError("unreachable")


def close_all() -> None:
    """Close this process's connections (those through a jump host before the jump)."""
    with _lock:
        if _owner != os.getpid():
            _clients.clear()
            return
        for target in reversed(list(_clients)):
            _clients.pop(target).close()


atexit.register(close_all)


# --- commands ---------------------------------------------------------------------------
def run(spec: Mapping[str, Any], argv: Sequence[str], *,
        timeout: float) -> subprocess.CompletedProcess[str]:
    """Run argv on the host and collect its exit status, stdout and stderr (stdin: none).

    Raises CommandTimeout after `timeout` seconds (the channel is then closed), SSHError
    when the host cannot be reached. An exit status of -1: the command ended without one
    (killed by a signal)."""
    deadline = time.monotonic() + timeout
    channel = _session(resolve(spec))
    try:
        channel.exec_command(remote_command(argv))
        channel.shutdown_write()
        ready = channel.fileno()  # readable when either stream has data, or at the end
        out, err = _Tail(), _Tail()
        while True:
            if channel.recv_ready():
                out.add(channel.recv(65536))
            elif channel.recv_stderr_ready():
                err.add(channel.recv_stderr(65536))
            elif (channel.closed or channel.eof_received) and channel.exit_status_ready():
                break
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CommandTimeout(f"{argv[0]} timed out after {timeout}s")
                if channel.eof_received:  # all output is in; the exit status follows
                    channel.status_event.wait(min(left, 1.0))
                else:
                    select.select([ready], [], [], min(left, 1.0))
        status = channel.recv_exit_status()
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise SSHError(f"{argv[0]}: the connection failed: {exc or type(exc).__name__}") \
            from exc
    finally:
        channel.close()
    return subprocess.CompletedProcess(list(argv), status, out.text(), err.text())


class _Tail:
    """A stream's last OUTPUT_KEPT_BYTES, and how many bytes before them were cut."""

    def __init__(self) -> None:
        self.kept = bytearray()
        self.cut = 0

    def add(self, data: bytes) -> None:
        self.kept += data
        if len(self.kept) > 2 * OUTPUT_KEPT_BYTES:  # trimmed now and then, not every time
            self._trim()

    def _trim(self) -> None:
        over = len(self.kept) - OUTPUT_KEPT_BYTES
        if over > 0:
            del self.kept[:over]
            self.cut += over

    def text(self) -> str:
        self._trim()
        kept = self.kept.decode(errors="replace")
        if not self.cut:
            return kept
        return (f"[splitbench: the first {self.cut} bytes of this output were cut; its last "
                f"{OUTPUT_KEPT_BYTES} are kept]\n{kept}")


def remote_command(argv: Sequence[str]) -> str:
    """The line the remote login shell is given: `exec /bin/sh -c '<argv, quoted>'`."""
    return "exec /bin/sh -c " + shlex.quote(shlex.join(argv))


def popen(spec: Mapping[str, Any], argv: Sequence[str], *, stdout: Any = None,
          stdin: bool = False) -> RemoteProcess:
    """Start argv on the host, running while the caller needs it: see RemoteProcess."""
    channel = _session(resolve(spec))
    try:
        channel.exec_command(remote_command(argv))
        if not stdin:
            channel.shutdown_write()
    except (paramiko.SSHException, OSError, EOFError) as exc:
        channel.close()
        raise SSHError(f"{argv[0]}: the connection failed: {exc or type(exc).__name__}") \
            from exc
    return RemoteProcess(channel, list(argv), stdout=stdout, stdin=stdin)
