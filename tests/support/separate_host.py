"""A host B that is another machine: its own Debian root filesystem, not this one's.

tests/integration/test_ssh.py's host B is a network namespace of this machine: the same
files, the same build, the same root. This B has a root filesystem of its own, made once
by mmdebstrap and cached under ~/.cache/splitbench/hostb/, and every start is a fresh
machine: an overlay on that cached tree (its changes under the test's tmp_path), in
network, mount, PID and UTS namespaces of its own, on CPUs of its own, joined to this
machine (host A) by a veth pair and reached only through a real sshd, as the
unprivileged user `bench` (uid 1000; sudo rights only as `sudoers` grants them).

Use the fixture (a test module takes it in as one of its own):

    from tests.support import separate_host

    separate_host_b = separate_host.separate_host_b

    def test_something(separate_host_b):
        b = separate_host_b(sudoers="bench ALL=(root) NOPASSWD: /usr/sbin/ip")
        host_from_spec("b", b).run(["id"])

or the context manager `host_b(tmp_path, ...)` (what the fixture calls). Both give
host B's settings (see `start_host_b`): `config_block(b)` is what a pair's config takes
as `hosts.b`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from splitbench.infra import procs, ssh
from splitbench.infra.hosts import Host, HostError

SUITE = "bookworm"
VARIANTS: dict[str, tuple[str, ...]] = {
    # What splitbench runs on B (and sudo, for the rights a test grants).
    "full": ("openssh-server", "python3", "iperf3", "sockperf", "iproute2", "nftables",
             "sudo", "procps", "iputils-ping"),
    # B without splitbench's tools: the doctor's checks have something to miss.
    "bare": ("openssh-server",),
}
CACHE = Path("~/.cache/splitbench/hostb").expanduser()
USER, UID, HOME = "bench", 1000, "/home/bench"
HOSTNAME = "hostb"


class HostBError(RuntimeError):
    """Host B could not be built or started."""


@dataclass(frozen=True)
class Network:
    """B's namespace, the veth pair's ends (A's, B's), their addresses and sshd's port.
    A second B beside the first needs other names: SECOND_NETWORK."""

    ns: str = "sb-hostb"
    if_a: str = "sbhb-a"
    if_b: str = "sbhb-b"
    addr_a: str = "10.214.20.1"
    addr_b: str = "10.214.20.2"
    prefix: int = 30
    port: int = 22


SECOND_NETWORK = Network("sb-hostb2", "sbhb2-a", "sbhb2-b", "10.214.21.1", "10.214.21.2")


# --- the root filesystem, built once -------------------------------------------------
def rootfs(variant: str = "full") -> Path:
    """The cached root filesystem of `variant`, built now if it is not there yet. Built
    into a temporary sibling and renamed, under a file lock: a tree is whole or absent,
    and two test processes build it once."""
    packages = VARIANTS[variant]
    recipe = json.dumps({"suite": SUITE, "packages": sorted(packages)})
    path = CACHE / f"{variant}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"
    if path.is_dir():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_dir():
            _build(packages, path)
    return path


def _build(packages: tuple[str, ...], path: Path) -> None:
    mmdebstrap = _mmdebstrap()
    # Left by a build that was killed (we hold the lock: no build is running now).
    for stale in path.parent.glob(f".{path.name}.build-*"):
        shutil.rmtree(stale)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.build-", dir=path.parent))
    try:
        started = time.monotonic()
        result = subprocess.run(
            [mmdebstrap, "--variant=minbase", f"--include={','.join(packages)}", SUITE,
             str(staging)], capture_output=True, text=True)
        if result.returncode != 0:
            raise HostBError(f"mmdebstrap failed (exit {result.returncode}): "
                             f"{(result.stdout + result.stderr)[-3000:]}")
        staging.chmod(0o755)  # mkdtemp's 0700 would be B's /
        # openssh-server's installation made host keys: every B would share them.
        for key in (staging / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        staging.rename(path)
        print(f"host B root filesystem {path.name} built in "
              f"{time.monotonic() - started:.1f} s")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _mmdebstrap() -> str:
    found = shutil.which("mmdebstrap")
    if found:
        return found
    if os.geteuid() != 0:
        raise HostBError("mmdebstrap is not installed, and installing it needs root: "
                         "apt-get install mmdebstrap")
    result = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends",
                             "mmdebstrap"], capture_output=True, text=True,
                            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    found = shutil.which("mmdebstrap")
    if result.returncode != 0 or not found:
        raise HostBError(f"apt-get install mmdebstrap failed: {result.stderr[-2000:]}")
    return found


# --- one start ------------------------------------------------------------------------
def start_host_b(tmp_path: Path, variant: str = "full", sudoers: str | None = None,
                 net: Network = Network(), cpus: str = "1", a_end_up: bool = True,
                 timeout: float = 15, wait_for_names: float = 240) -> dict[str, Any]:
    """Start a fresh host B (stop it with `stop_host_b`). `sudoers`: one line for B's
    /etc/sudoers.d/splitbench (None: bench has no sudo rights); `cpus`: B's CPUs, a
    taskset list; `a_end_up`: give A's end of the veth its address and bring it up
    (False: leave it down and bare, as a link's set-up expects a fresh one);
    `wait_for_names`: how long to wait while another B (of any test process) has
    `net`'s names.

    Returns host B's settings: `ssh`, `ssh_port`, `identity`, `known_hosts` (what a
    pair's `hosts.b` takes: `config_block`), and for tests `netns`, `interface_a`,
    `interface_b`, `addr_a`, `addr_b`, `prefix`, `cpus` (B's CPUs, as
    Cpus_allowed_list writes them), `variant`, `rootfs` (the cached tree: never write
    to it), `upper` (what B changed, on A; kept after B stops), `merged` (where B's
    root is mounted, inside B's namespaces only), `root` (B's / as A sees it while B
    runs: /proc/PID/root of B's first process), `init_pid` (that process, sshd, pid 1
    in B), `process_key` (its record's key), `log` (sshd's log), `start_s` (how long
    the start took, from the cached tree) and `waited_s` (for another B's names)."""
    if variant == "bare" and sudoers is not None:
        raise ValueError("the bare variant has no sudo: sudoers would grant nothing")
    lower = rootfs(variant)
    waited = time.monotonic()
    _claim_names(net, wait_for_names)
    started = time.monotonic()
    try:
        settings = _boot(tmp_path / f"hostb-{net.ns}", lower, net, sudoers, cpus,
                         a_end_up, timeout)
    except BaseException:
        _end(net.ns, net.if_a)
        raise
    return {**settings, "variant": variant, "waited_s": round(started - waited, 2),
            "start_s": round(time.monotonic() - started, 2)}


def _boot(base: Path, lower: Path, net: Network, sudoers: str | None, cpus: str,
          a_end_up: bool, timeout: float) -> dict[str, Any]:
    layers = {name: base / name for name in ("upper", "work", "merged", "keys")}
    for path in layers.values():
        path.mkdir(parents=True)
    known_hosts = _install_user_and_keys(lower, layers["upper"], layers["keys"], net,
                                         sudoers)
    _make_network(net, a_end_up)
    log = base / "sshd.log"
    # The group: unshare's parent holds SIGTERM back and does not pass it on, but B's
    # sshd (in the group) ends on it, and with it, as its PID 1, all of B.
    record = procs.spawn(_machine_argv(lower, layers, net.ns, cpus), role="other",
                         key=_process_key(net.ns), log_path=log, extra={"group": True})
    try:
        Host("b", netns=net.ns).wait_listening(net.addr_b, net.port, timeout=timeout,
                                               server=record)
    except HostError as exc:
        raise HostBError(f"host B's sshd did not listen ({exc}); its log: "
                         f"{log.read_text()[-2000:]}") from exc
    init_pid = _child(record["pid"])
    return {
        "ssh": f"{USER}@{net.addr_b}", "ssh_port": net.port,
        "identity": str(layers["keys"] / "client"), "known_hosts": str(known_hosts),
        "netns": net.ns, "interface_a": net.if_a, "interface_b": net.if_b,
        "addr_a": net.addr_a, "addr_b": net.addr_b, "prefix": net.prefix, "cpus": cpus,
        "rootfs": str(lower), "upper": str(layers["upper"]),
        "merged": str(layers["merged"]), "root": f"/proc/{init_pid}/root",
        "init_pid": init_pid, "process_key": _process_key(net.ns), "log": str(log),
    }


def stop_host_b(settings: dict[str, Any]) -> None:
    """End B: this process's SSH connections, B's processes (all of them: its first
    process is its PID namespace's init), its namespace and the veth pair with it. The
    overlay goes with the last process that had it mounted."""
    ssh.close_all()
    _end(settings["netns"], settings["interface_a"])


def _end(ns: str, if_a: str) -> None:
    """Whatever of B has started: its processes, its namespace, the claim on its names."""
    procs.stop(_process_key(ns))
    result = subprocess.run(["ip", "netns", "delete", ns], capture_output=True, text=True)
    if result.returncode == 0 or "No such file" in result.stderr:
        procs.forget("netns", ns)
    _wait_link_gone(if_a)
    claim = _CLAIMS.pop(ns, None)
    if claim is not None:
        claim.close()  # and with it the lock


def _process_key(ns: str) -> str:
    return f"hostb-{ns}"


# The names of the Bs this process runs, each held by a lock another process waits on:
# without it, a second test process's start would delete this one's B's namespace.
_CLAIMS: dict[str, IO[str]] = {}


def _claim_names(net: Network, wait: float) -> None:
    if net.ns in _CLAIMS:
        raise HostBError(f"this process runs a host B named {net.ns} already: give a "
                         "second one other names (SECOND_NETWORK)")
    CACHE.mkdir(parents=True, exist_ok=True)
    claim = open(CACHE / f".names-{net.ns}.lock", "w")  # noqa: SIM115  (held while B runs)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                claim.close()
                raise HostBError(f"another host B has the names {net.ns} "
                                 f"({net.if_a}, {net.addr_b}) after {wait} s: "
                                 "give this one others (Network)") from None
            time.sleep(0.2)
    _CLAIMS[net.ns] = claim


@contextlib.contextmanager
def host_b(tmp_path: Path, **options: Any) -> Iterator[dict[str, Any]]:
    """start_host_b's B (same options) for the length of the block."""
    settings = start_host_b(tmp_path, **options)
    try:
        yield settings
    finally:
        stop_host_b(settings)


@pytest.fixture
def separate_host_b(state_dir: Path, tmp_path: Path) -> Iterator[Callable[..., dict]]:
    """Starts host Bs: call it with start_host_b's options (a second B needs
    net=SECOND_NETWORK); all of them end with the test. A B that does not start fails
    the test with sshd's log."""
    with contextlib.ExitStack() as stack:
        def start(**options: Any) -> dict[str, Any]:
            try:
                settings = stack.enter_context(host_b(tmp_path, **options))
            except HostBError as exc:
                pytest.fail(str(exc))
            print(f"host B ({settings['variant']}) started in {settings['start_s']} s"
                  f" (waited {settings['waited_s']} s for its names)")
            return settings

        yield start
    ssh.close_all()


def config_block(settings: dict[str, Any]) -> dict[str, Any]:
    """What a pair's config takes as `hosts.b`."""
    return {key: settings[key] for key in ssh.SETTINGS_KEYS}


def _machine_argv(lower: Path, layers: dict[str, Path], ns: str, cpus: str) -> list[str]:
    """B's first process, on B's CPUs in B's network namespace. The overlay is mounted
    in `ip netns exec`'s private mount namespace (so --mount-proc finds B's /proc dir
    on it); unshare then gives B its own mounts, PIDs and hostname, and sshd is PID 1."""
    merged = layers["merged"]
    for path in (lower, layers["upper"], layers["work"]):
        if any(c in str(path) for c in ",:"):  # overlay's option separators
            raise HostBError(f"an overlay layer's path cannot hold ',' or ':': {path}")
    overlay = f"lowerdir={lower},upperdir={layers['upper']},workdir={layers['work']}"
    inner = (f"hostname {HOSTNAME} && exec chroot {shlex.quote(str(merged))} "
             "/usr/sbin/sshd -D -e -f /etc/ssh/sshd_config")
    q = shlex.quote
    script = "\n".join([
        f"mount -t overlay overlay -o {q(overlay)} {q(str(merged))}",
        f"mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs {q(str(merged / 'tmp'))}",
        f"mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs {q(str(merged / 'dev/shm'))}",
        # The kernel's wake-up latency request, as every machine has it (root only).
        f"touch {q(str(merged / 'dev/cpu_dma_latency'))}",
        f"mount --bind /dev/cpu_dma_latency {q(str(merged / 'dev/cpu_dma_latency'))}",
        # Mounted in B's network namespace: /sys/class/net lists B's interfaces.
        f"mount -t sysfs sysfs {q(str(merged / 'sys'))}",
        "exec unshare --mount --pid --uts --fork --kill-child "
        f"--mount-proc={q(str(merged / 'proc'))} sh -c {q(inner)}",
    ])
    return ["taskset", "-c", cpus, "ip", "netns", "exec", ns, "sh", "-ec", script]


def _child(pid: int) -> int:
    """unshare's forked child: B's PID 1."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    if len(children) != 1:
        raise HostBError(f"B's unshare (pid {pid}) has children {children}, not one")
    return int(children[0])


def _make_network(net: Network, a_end_up: bool) -> None:
    """B's namespace, recorded (teardown deletes it, and the veth pair with it), with
    B's end up and addressed: sshd listens on that address."""
    subprocess.run(["ip", "netns", "delete", net.ns], capture_output=True)
    subprocess.run(["ip", "link", "del", net.if_a], capture_output=True)
    _wait_link_gone(net.if_a)
    _sh("ip", "netns", "add", net.ns)
    procs.record_namespace(net.ns)
    _sh("ip", "link", "add", net.if_a, "type", "veth", "peer", "name", net.if_b,
        "netns", net.ns)
    _sh("ip", "-n", net.ns, "link", "set", "lo", "up")
    _sh("ip", "-n", net.ns, "addr", "add", f"{net.addr_b}/{net.prefix}", "dev", net.if_b)
    _sh("ip", "-n", net.ns, "link", "set", net.if_b, "up")
    if a_end_up:
        _sh("ip", "addr", "add", f"{net.addr_a}/{net.prefix}", "dev", net.if_a)
        _sh("ip", "link", "set", net.if_a, "up")


def _wait_link_gone(name: str, timeout: float = 10) -> None:
    """A deleted namespace's veth pair disappears asynchronously."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and subprocess.run(
            ["ip", "link", "show", name], capture_output=True).returncode == 0:
        time.sleep(0.05)


def _sh(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise HostBError(f"{shlex.join(argv)} failed: {result.stderr.strip()}")


# --- B's users, keys and sshd, written into the overlay's upper layer before it is
# mounted (B's first boot, without running anything inside it) --------------------------
def _install_user_and_keys(lower: Path, upper: Path, keys: Path, net: Network,
                           sudoers: str | None) -> Path:
    """bench with a fresh client key, fresh host keys, sshd's settings, B's names and
    the sudoers line. Returns the known_hosts file for A."""
    upper.chmod(0o755)  # the upper layer's root is B's /
    _append(lower, upper, "etc/passwd", f"{USER}:x:{UID}:{UID}:{USER}:{HOME}:/bin/bash")
    # "*", not "!": with UsePAM no, sshd refuses an account whose password is locked.
    _append(lower, upper, "etc/shadow", f"{USER}:*:19000:0:99999:7:::")
    _append(lower, upper, "etc/group", f"{USER}:x:{UID}:")
    _append(lower, upper, "etc/gshadow", f"{USER}:!::")
    _write(lower, upper, "etc/hostname", f"{HOSTNAME}\n")
    # sudo resolves the host's own name.
    _write(lower, upper, "etc/hosts", f"127.0.0.1 localhost\n127.0.1.1 {HOSTNAME}\n")

    _keygen(keys / "client")
    ssh_dir = upper / HOME.lstrip("/") / ".ssh"
    _mirror_dirs(lower, upper, Path(HOME).parent.relative_to("/"))
    for path, mode in ((ssh_dir.parent, 0o755), (ssh_dir, 0o700)):
        path.mkdir(mode=mode)
        os.chown(path, UID, UID)
    shutil.copy(keys / "client.pub", ssh_dir / "authorized_keys")
    os.chown(ssh_dir / "authorized_keys", UID, UID)
    (ssh_dir / "authorized_keys").chmod(0o600)

    host_key = upper / "etc/ssh/ssh_host_ed25519_key"
    _mirror_dirs(lower, upper, Path("etc/ssh"))
    _keygen(host_key)
    _write(lower, upper, "etc/ssh/sshd_config", _sshd_config(net))
    _mirror_dirs(lower, upper, Path("run"))
    (upper / "run/sshd").mkdir(mode=0o755)  # sshd's privilege separation directory
    if sudoers is not None:
        _write(lower, upper, "etc/sudoers.d/splitbench", sudoers.rstrip("\n") + "\n",
               mode=0o440)

    # For port 22 known_hosts names the bare address (ssh.Target.known_name).
    name = net.addr_b if net.port == 22 else f"[{net.addr_b}]:{net.port}"
    known_hosts = keys / "known_hosts"
    known_hosts.write_text(f"{name} {host_key.with_suffix('.pub').read_text()}")
    return known_hosts


def _sshd_config(net: Network) -> str:
    return (
        f"Port {net.port}\nListenAddress {net.addr_b}\n"
        "HostKey /etc/ssh/ssh_host_ed25519_key\n"
        "PermitRootLogin no\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nPidFile none\n"
        # splitbench copies files to B over SFTP.
        "Subsystem sftp /usr/lib/openssh/sftp-server\n"
        # A session whose client is gone ends within seconds instead of lingering.
        "ClientAliveInterval 2\nClientAliveCountMax 2\n")


def _keygen(path: Path) -> None:
    _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", HOSTNAME, "-f", str(path))


def _mirror_dirs(lower: Path, upper: Path, rel: Path) -> None:
    """rel's directories in the upper layer, with the owner and mode the cached tree
    gives them: a directory of the upper layer sets the merged one's."""
    for part in reversed([rel, *rel.parents][:-1]):
        target = upper / part
        if not target.exists():
            source = (lower / part).stat()
            target.mkdir()
            os.chown(target, source.st_uid, source.st_gid)
            target.chmod(source.st_mode & 0o7777)


def _write(lower: Path, upper: Path, rel: str, text: str, mode: int = 0o644) -> None:
    _mirror_dirs(lower, upper, Path(rel).parent)
    (upper / rel).write_text(text)
    os.chown(upper / rel, 0, 0)
    (upper / rel).chmod(mode)


def _append(lower: Path, upper: Path, rel: str, line: str) -> None:
    """The cached tree's file with one more line, its owner and mode kept."""
    source = lower / rel
    _write(lower, upper, rel, source.read_text() + line + "\n",
           mode=source.stat().st_mode & 0o7777)
    os.chown(upper / rel, source.stat().st_uid, source.stat().st_gid)
