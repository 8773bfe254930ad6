"""Where a command runs: this machine, a network namespace on it, or a host over SSH.

Commands are argument lists end to end. The one place a string is built is the remote
command line of SSH, and there every argument is quoted (shlex.join). SSH goes through
paramiko (splitbench/infra/ssh.py): one connection per host per process, reused for
every command; host keys are verified and an unknown or changed one is refused; nothing
prompts.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from splitbench.contracts.slices import HostSlice
from splitbench.errors import SplitbenchError
from splitbench.infra import procs
from splitbench.infra.polling import poll_until
from splitbench.infra.procs import ProcRecord

if TYPE_CHECKING:  # paramiko loads only for a remote host
    from splitbench.infra.ssh import SSHSettings

CLONE_NEWNET = 0x40000000


class HostError(SplitbenchError):
    """A command on a host failed; the message names the host."""


class HostJson(TypedDict):
    """A `Host` as JSON (dataclasses.asdict): a link record's host_a and host_b."""

    name: str
    netns: str | None
    ssh: str | None
    ssh_port: int | None
    identity: str | None
    known_hosts: str | None
    python_path: str | None
    cpus: str | None


@dataclass(frozen=True)
class Host:
    """A host of a pair: this machine (netns None), a namespace on it, or an SSH host."""

    name: str
    netns: str | None = None
    ssh: str | None = None  # destination, e.g. "bench@192.0.2.7"
    ssh_port: int | None = None
    identity: str | None = None
    known_hosts: str | None = None
    python_path: str | None = None
    # CPUs the host's processes run on (taskset list, "0" or "2-3"): in the embedded
    # lab each emulated host gets its own, as two machines would have. None: any CPU.
    cpus: str | None = None

    @property
    def remote(self) -> bool:
        return self.ssh is not None

    @property
    def python(self) -> str:
        """A Python 3 on the host: this interpreter locally, `python3` (or as set) over SSH."""
        if self.python_path:
            return self.python_path
        return "python3" if self.remote else sys.executable

    def ssh_settings(self) -> SSHSettings:
        """How to reach this host over SSH, as JSON (process records keep it)."""
        from splitbench.infra import ssh  # paramiko loads only for a remote host

        return ssh.settings({"ssh": self.ssh, "ssh_port": self.ssh_port,
                             "identity": self.identity, "known_hosts": self.known_hosts})

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """The local command line that runs argv on this host (not for an SSH host:
        `run` and `popen` reach it through the connection)."""
        if self.ssh is not None:
            raise HostError(f"host {self.name}: no local command line for an SSH host")
        pinned = ["taskset", "-c", self.cpus, *argv] if self.cpus else list(argv)
        if self.netns is None:
            return pinned
        return ["ip", "netns", "exec", self.netns, *pinned]

    def run(
        self, argv: Sequence[str], *, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        if self.remote:
            result = self._run_remote(argv, timeout)
        else:
            try:
                result = subprocess.run(
                    self.wrap(argv), capture_output=True, text=True, timeout=timeout
                )
            except FileNotFoundError as exc:
                raise HostError(f"host {self.name}: {self.wrap(argv)[0]} not found") from exc
            except subprocess.TimeoutExpired as exc:
                raise HostError(f"host {self.name}: {argv[0]} timed out after "
                                f"{timeout}s") from exc
        if check and result.returncode != 0:
            raise HostError(
                f"host {self.name}: {' '.join(argv[:3])} failed "
                f"(exit {result.returncode}): {result.stderr.strip()[-500:]}"
            )
        return result

    def _run_remote(self, argv: Sequence[str],
                    timeout: float) -> subprocess.CompletedProcess[str]:
        from splitbench.infra import ssh

        try:
            return ssh.run(self.ssh_settings(), argv, timeout=timeout)
        except ssh.CommandTimeout as exc:
            raise HostError(f"host {self.name}: {argv[0]} timed out after {timeout}s") from exc
        except ssh.SSHError as exc:
            raise HostError(f"host {self.name}: ssh to {self.ssh} failed: {exc}") from exc

    def popen(self, argv: Sequence[str], *, stdout: Any = None, stdin: bool = False) -> Any:
        """A long-running command on this SSH host, used like subprocess.Popen: stdout
        None/DEVNULL, PIPE (`.stdout` read line by line) or an open file; stdin=True gives
        `.stdin`, whose close() ends the command's input; poll, wait, terminate, kill
        (these two close the channel). See ssh_process.RemoteProcess."""
        from splitbench.infra import ssh

        if not self.remote:
            raise HostError(f"host {self.name}: popen is for SSH hosts; run locally")
        try:
            return ssh.popen(self.ssh_settings(), argv, stdout=stdout, stdin=stdin)
        except ssh.SSHError as exc:
            raise HostError(f"host {self.name}: ssh to {self.ssh} failed: {exc}") from exc

    def put(self, local: Path, path: str, *, mode: int) -> None:
        """Copy a file of this machine to `path` on this host (SFTP over the host's one
        connection; a plain copy on this machine), with `mode`."""
        if not self.remote:
            self.run(["install", "-m", f"{mode:o}", str(local), path])
            return
        from splitbench.infra import ssh

        try:
            sftp_session = ssh.client(self.ssh_settings()).open_sftp()
        except (ssh.SSHError, ssh.paramiko.SSHException, OSError) as exc:
            raise HostError(f"host {self.name}: ssh to {self.ssh} offers no SFTP ({exc}): "
                            "its sshd_config needs a Subsystem sftp line (Debian's has "
                            "one)") from exc
        try:
            with sftp_session as sftp:
                sftp.put(str(local), path)
                sftp.chmod(path, mode)
        except (ssh.SSHError, ssh.paramiko.SSHException, OSError) as exc:
            raise HostError(f"host {self.name}: copying {local.name} to {path} "
                            f"failed: {exc}") from exc

    def is_root(self) -> bool:
        """Whether commands on this host run as root (over SSH: the SSH user)."""
        return self.run(["id", "-u"]).stdout.strip() == "0"

    def missing_tools(self, tools: Sequence[str]) -> list[str]:
        """Those of `tools` this host has neither on its PATH nor in the system's sbin
        directories (an ordinary user's PATH lacks them; Debian puts nft there), asked
        in one command."""
        absent = self.run(["sh", "-c", 'PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"; '
                                       'for t; do command -v "$t" >/dev/null || echo "$t"; '
                                       'done', "sh", *tools], check=False).stdout.split()
        return [tool for tool in tools if tool in absent]

    def wait_listening(self, addr: str, port: int, timeout: float,
                       server: ProcRecord | None = None) -> None:
        """Wait until this host has a TCP listener on addr:port. It does not connect:
        a ggml-rpc-server would take a probing connection for its one client.
        `server`: the process that is to listen; the listener must be it (a process of
        its session): another user who binds the port first would otherwise be taken
        for the worker and sent its weights and every activation. A listener that is
        not it, or `server` ending first (an address this host does not have, a port
        in use), ends the wait at once, saying so."""
        def read() -> tuple[list[str], list[int]]:
            found = self.run(["ss", "-Hltnpe", f"src {addr}:{port}"],
                             check=False).stdout.splitlines()
            return found, [int(p) for line in found for p in re.findall(r"pid=(\d+)", line)]

        def listening() -> bool:
            found, pids = read()
            if found and server is None:
                return True
            if found and not pids:
                # ss maps sockets to processes before it lists the sockets: one made in
                # between shows no process once. Asked again, its own would.
                found, pids = read()
            if found and server is not None:
                if any(self.session_of(pid) == server["pid"] for pid in pids):
                    return True
                # ss prints a socket's owner (uid:N) to any user, root's (0) not at all.
                uids = {int(u) for line in found for u in re.findall(r"\buid:(\d+)", line)}
                owner = ", ".join(f"uid {u}" for u in sorted(uids)) or "uid 0"
                raise HostError(
                    f"host {self.name}: {addr}:{port} is held by a process that is not "
                    f"this run's {server['role']} ("
                    + (f"pid {', '.join(map(str, pids))}, {owner}" if pids else
                       f"{owner}, another user's: this user cannot see its pid")
                    + "): another user may be posing as it, so nothing is sent there; "
                    "stop that process, or tear the run down (python -m splitbench "
                    "teardown) so that it chooses a block of ports no process holds")
            if server is not None and not procs.is_alive(server):
                how = procs.exit_status(server) or "ended"
                log = f"; its log: {server['log']}" if server.get("log") else ""
                raise HostError(f"host {self.name}: {server['role']} {how} before it "
                                f"listened on {addr}:{port}{log}")
            return False

        if poll_until(listening, timeout, 0.1):
            return
        raise HostError(f"host {self.name}: no listener on {addr}:{port} after {timeout}s")

    def session_of(self, pid: int) -> int | None:
        """The session id of process `pid` on this host (None where it has gone): a
        process splitbench starts leads its own session, so its children share its id."""
        stat = self.run(["cat", f"/proc/{pid}/stat"], check=False).stdout
        fields = stat.rpartition(")")[2].split()  # after the command name: state, ppid,
        return int(fields[3]) if len(fields) > 3 else None  # pgrp, session

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Run the calling thread (and threads it starts) in this host's network stack,
        on this host's CPUs.

        Sockets opened inside reach the host's link and loopback as the host's own
        programs would: the benchmark client then sits on host A, like a real user's.
        """
        if self.netns is None:
            yield
            return
        libc = ctypes.CDLL(None, use_errno=True)
        home_cpus = os.sched_getaffinity(0)
        with open("/proc/thread-self/ns/net") as home, open(f"/run/netns/{self.netns}") as ns:
            if libc.setns(ns.fileno(), CLONE_NEWNET) != 0:
                raise HostError(f"host {self.name}: setns failed: "
                                f"{os.strerror(ctypes.get_errno())}")
            try:
                if self.cpus:
                    os.sched_setaffinity(0, cpu_set(self.cpus))
                yield
            finally:
                libc.setns(home.fileno(), CLONE_NEWNET)  # first: back home, whatever failed
                os.sched_setaffinity(0, home_cpus)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        role: str,
        key: str,
        log_path: Path,
        env: dict[str, str] | None = None,
        extra: ProcRecord | None = None,
    ) -> ProcRecord:
        """Start a long-lived process on this host, recorded for teardown."""
        if self.remote:
            return self._spawn_remote(argv, role=role, key=key, env=env, extra=extra)
        return procs.spawn(
            self.wrap(argv),
            role=role,
            key=key,
            log_path=log_path,
            env=env,
            extra={"host": self.name, **(extra or {})},
        )

    def _spawn_remote(
        self,
        argv: Sequence[str],
        *,
        role: str,
        key: str,
        env: dict[str, str] | None,
        extra: ProcRecord | None,
    ) -> ProcRecord:
        """Start a detached process on the SSH host; record its remote pid and start time,
        both read by the script that starts it (a second call could fail, and a process
        without a start time is one teardown cannot stop)."""
        assignments = [f"{k}={v}" for k, v in (env or {}).items()]
        # Its log: a new file of the user's own (mktemp), not a fixed name in /tmp that
        # another user could have made first. Its start time: field 22 of its stat, the
        # 20th after the command name's ")" (empty if it has already gone).
        script = ('log=$(mktemp "/tmp/splitbench-$1.XXXXXXXX") || exit 1; shift; '
                  'setsid "$@" > "$log" 2>&1 < /dev/null & pid=$!; '
                  'stat=$(cat "/proc/$pid/stat" 2>/dev/null); set -- ${stat##*)}; '
                  'echo "$pid ${20} $log"')
        command = ["sh", "-c", script, "sh", key, *(["env", *assignments] if env else []),
                   *argv]
        pid_text, start, log = self.run(command, timeout=30).stdout.splitlines()[-1].split(
            " ", 2)
        pid = int(pid_text)
        remote = self.ssh_settings()
        record: ProcRecord = {
            "pid": pid,
            "start_time": int(start) if start.isdigit() else None,
            "remote": remote,
            "role": role,
            "key": key,
            "argv": list(argv),
            "log": f"{self.ssh}:{log}",
            "remote_log": log,  # brought back and removed when the process is forgotten
            "host": self.name,
            **(extra or {}),
        }
        procs.record_process(record)
        return record


def cpu_set(cpus: str) -> set[int]:
    """A taskset CPU list ("0", "0-3", "0,2") as a set of CPU numbers."""
    out: set[int] = set()
    for part in cpus.split(","):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


def host_from_spec(name: str, spec: HostSlice) -> Host:
    """A host from its config block: over SSH when it names a destination."""
    return Host(name, ssh=spec.get("ssh"), ssh_port=spec.get("ssh_port"),
                identity=spec.get("identity"), known_hosts=spec.get("known_hosts"),
                python_path=spec.get("python"))
