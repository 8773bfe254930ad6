"""The in-process TCP counter reader against real loopback connections."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

from splitbench.infra import sockdiag


@pytest.fixture
def connection():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        peer, _ = server.accept()
        yield client, peer, port
        client.close()
        peer.close()


def _exchange(client: socket.socket, peer: socket.socket, out: int, back: int) -> None:
    client.sendall(b"x" * out)
    got = 0
    while got < out:
        got += len(peer.recv(65536))
    peer.sendall(b"y" * back)
    got = 0
    while got < back:
        got += len(client.recv(65536))


def test_counts_the_bytes_each_way(connection):
    client, peer, port = connection
    _exchange(client, peer, 12345, 777)
    found = sockdiag.connections_to("127.0.0.1", port)
    assert len(found) == 1
    before = sockdiag.totals(sockdiag.read(found))
    assert before["bytes_sent"] == 12345
    assert before["bytes_received"] == 777
    _exchange(client, peer, 1000, 20)
    after = sockdiag.totals(sockdiag.read(found))
    assert after["bytes_sent"] - before["bytes_sent"] == 1000
    assert after["bytes_received"] - before["bytes_received"] == 20
    assert after["data_segs_out"] > before["data_segs_out"]


def test_agrees_with_ss(connection):
    client, peer, port = connection
    _exchange(client, peer, 5000, 300)
    ours = sockdiag.totals(sockdiag.connections_to("127.0.0.1", port))
    text = subprocess.run(["ss", "-tinH", "dst", f"127.0.0.1:{port}"], capture_output=True,
                          text=True, check=True).stdout
    for name in ("bytes_sent", "bytes_received", "data_segs_out", "data_segs_in"):
        assert f"{name}:{ours[name]}" in text, (name, ours, text)


def test_a_closed_connection_drops_out(connection):
    client, peer, port = connection
    found = sockdiag.connections_to("127.0.0.1", port)
    client.close()
    peer.close()
    time.sleep(0.05)
    assert sockdiag.read(found) == []
    assert sockdiag.connections_to("127.0.0.1", port) == []
