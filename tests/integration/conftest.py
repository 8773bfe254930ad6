"""Fixtures the integration tests share."""

from __future__ import annotations

import subprocess
import time

import pytest

from splitbench.infra import procs, ssh
from tests.support.ssh_b import ADDR_B, IF_A, IF_B, NS, sh, start_sshd


@pytest.fixture
def host_b(state_dir, tmp_path):
    """Namespace B with a veth to this machine and a real sshd listening on B's address."""
    subprocess.run(["ip", "netns", "delete", NS], capture_output=True)
    # A deleted namespace's veth pair disappears asynchronously: wait for A's end to go.
    subprocess.run(["ip", "link", "del", IF_A], capture_output=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and subprocess.run(
            ["ip", "link", "show", IF_A], capture_output=True).returncode == 0:
        time.sleep(0.1)
    sh("ip", "netns", "add", NS)
    procs.record_namespace(NS)  # teardown deletes it, and the veth pair with it
    sh("ip", "link", "add", IF_A, "type", "veth", "peer", "name", IF_B, "netns", NS)
    sh("ip", "-n", NS, "link", "set", "lo", "up")
    # B's address must exist before sshd can listen on it; splitbench re-applies it.
    sh("ip", "-n", NS, "addr", "add", f"{ADDR_B}/30", "dev", IF_B)
    sh("ip", "-n", NS, "link", "set", IF_B, "up")
    yield start_sshd(NS, ADDR_B, tmp_path)
    # This process's connections end with the test's sshd (its sessions would linger).
    ssh.close_all()
