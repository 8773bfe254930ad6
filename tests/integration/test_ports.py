"""The block of ports a run serves on lies outside both hosts' ephemeral port ranges: a
port the kernel gave an outgoing connection is held in TIME_WAIT after it closes, and no
server can bind it then (a vLLM launch failed so in CI, 'Address already in use')."""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from splitbench.infra.hosts import Host
from splitbench.infra.port_blocks import FIRST_PORT, PORT_BLOCK, PORT_BLOCKS
from splitbench.links import ports
from tests.conftest import needs_root

pytestmark = needs_root()

NS = "sb-ports-test"
LAST_PORT = FIRST_PORT + PORT_BLOCK * PORT_BLOCKS - 1


@pytest.fixture
def host(state_dir):
    subprocess.run(["ip", "netns", "delete", NS], capture_output=True)
    subprocess.run(["ip", "netns", "add", NS], check=True)
    subprocess.run(["ip", "-n", NS, "link", "set", "lo", "up"], check=True)
    try:
        yield Host("b", netns=NS)
    finally:
        subprocess.run(["ip", "netns", "delete", NS], check=True)


def sysctl(name: str, value: str) -> None:
    subprocess.run(["ip", "netns", "exec", NS, "sysctl", "-q", "-w", f"{name}={value}"],
                   check=True)


def test_a_closed_outgoing_connections_port_cannot_be_bound_by_a_server(host):
    """Why the rule exists: SO_REUSEADDR does not get a server past a client's
    TIME_WAIT on the same port."""
    script = textwrap.dedent("""
        import socket, time
        server = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        port = client.getsockname()[1]
        client.close(); time.sleep(0.1); accepted.close(); time.sleep(0.1)
        again = socket.socket()
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            again.bind(("127.0.0.1", port)); print("bound")
        except OSError as exc:
            print(exc.errno)
    """)
    done = subprocess.run(["ip", "netns", "exec", NS, "python3", "-c", script],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "98"  # EADDRINUSE


def test_the_default_range_leaves_every_block_free(host):
    outgoing = ports.ephemeral(host)
    assert min(outgoing) == 32768  # a new namespace has the kernel's default
    block = ports.free_block([host])
    assert block is not None and not any(port in block for port in outgoing)
    assert min(outgoing) > LAST_PORT


def test_a_range_over_the_blocks_is_refused_by_name_and_a_reservation_frees_it(host):
    sysctl("net.ipv4.ip_local_port_range", "10000 40000")
    assert ports.free_block([host]) is None
    why = ports.why_none_free([host])
    assert "ephemeral port range of host b (net.ipv4.ip_local_port_range)" in why, why
    assert f"net.ipv4.ip_local_reserved_ports={FIRST_PORT}-{LAST_PORT}" in why, why
    # One block reserved: that block, and no other, can be served on.
    sysctl("net.ipv4.ip_local_reserved_ports", f"{FIRST_PORT + PORT_BLOCK}-"
                                               f"{FIRST_PORT + 2 * PORT_BLOCK - 1}")
    block = ports.free_block([host])
    assert block is not None and block.base == FIRST_PORT + PORT_BLOCK


def test_a_listener_in_every_block_is_named_as_that(host, monkeypatch):
    monkeypatch.setattr(ports, "listened", lambda _host: set(range(FIRST_PORT, LAST_PORT + 1,
                                                                   PORT_BLOCK)))
    assert ports.free_block([host]) is None
    assert "has a listener on host A or host B" in ports.why_none_free([host])


def test_a_port_list_is_read_as_the_kernel_writes_it():
    assert ports.port_list("") == set()
    assert ports.port_list("20480-20482,30000\n") == {20480, 20481, 20482, 30000}
