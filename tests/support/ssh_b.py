"""Host B over SSH for the tests: a network namespace joined to this machine by a veth
pair, reached only through a real OpenSSH server with a known host key (the `host_b`
fixture, tests/integration/conftest.py, makes one per test)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from splitbench.infra import procs
from splitbench.infra.hosts import Host, HostError
from tests.conftest import needs_root

NS = "sb-sshtest-b"
IF_A, IF_B = "sbssh-a", "sbssh-b"
ADDR_A, ADDR_B = "10.214.9.1", "10.214.9.2"
PORT = 2222



def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def start_sshd(ns: str, addr: str, tmp_path: Path, wrap: tuple[str, ...] = ()) -> dict:
    """A real sshd in namespace `ns` on addr:PORT (and the namespace's loopback), with
    fresh host and client keys; `wrap`: a command it runs under (a private /dev/shm,
    say). Returns host B's SSH settings for a pair's config."""
    keys = tmp_path / "keys"
    keys.mkdir()
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "host"))
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "client"))
    shutil.copy(keys / "client.pub", keys / "authorized_keys")
    (keys / "known_hosts").write_text(f"[{addr}]:{PORT} {(keys / 'host.pub').read_text()}")
    (keys / "sshd_config").write_text(
        # B's loopback too: reachable from A only through B itself (the ProxyJump test).
        f"Port {PORT}\nListenAddress {addr}\nListenAddress 127.0.0.1\n"
        f"HostKey {keys / 'host'}\n"
        f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
        "StrictModes no\nUsePAM no\nPidFile none\n"
        # As Debian's own sshd_config: the run copies A's worker to B over SFTP.
        "Subsystem sftp internal-sftp\n"
        # A session whose client is gone (its namespace deleted under it, so no FIN ever
        # came) ends within seconds instead of lingering after the test.
        "ClientAliveInterval 2\nClientAliveCountMax 2\n")
    Path("/run/sshd").mkdir(exist_ok=True)
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    procs.spawn(["ip", "netns", "exec", ns, *wrap, sshd, "-D", "-e", "-f",
                 str(keys / "sshd_config")],
                role="other", key="sshd-test", log_path=tmp_path / "sshd.log")
    # sshd takes a moment to bind; a test that connects first would see "refused".
    try:
        Host("b", netns=ns).wait_listening(addr, PORT, timeout=15)
    except HostError:
        pytest.fail(f"sshd did not listen: {(tmp_path / 'sshd.log').read_text()[-2000:]}")
    return {"ssh": f"root@{addr}", "ssh_port": PORT, "identity": str(keys / "client"),
            "known_hosts": str(keys / "known_hosts")}


def link_spec(host_b: dict, **extra) -> dict:
    return {"pair": "rig", "link": "veth", "index": 1, "mode": "ssh",
            "hosts": {"a": {}, "b": host_b}, "interface_a": IF_A, "interface_b": IF_B,
            "addr_a": ADDR_A, "addr_b": ADDR_B, "prefix": 30, **extra}


# What every test of host B over SSH needs (each module's `pytestmark`).
NEEDS = [
    pytest.mark.slow,  # sshd in a namespace
    pytest.mark.timeout(600),  # one runs the workflow over SSH
    needs_root(),
    pytest.mark.skipif(shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists(),
                       reason="openssh-server not installed (./bootstrap.sh test installs it)"),
]
