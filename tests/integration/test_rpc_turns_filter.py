"""The turn counter's kernel filter on real packets: only segments with data to or from
the worker's address reach the process, each once (loopback shows every packet twice)."""

from __future__ import annotations

import socket
import struct
import time

from splitbench.infra import packets, rpc_turns
from tests.conftest import needs_root

pytestmark = needs_root()


def data_bytes(packet: bytes) -> int:
    """A captured IPv4 TCP segment's data length, from its headers."""
    total = struct.unpack_from("!H", packet, 2)[0]
    ip_header = (packet[0] & 0x0F) * 4
    return total - ip_header - (packet[ip_header + 12] >> 4) * 4


def test_only_segments_with_data_to_or_from_the_address_reach_the_process():
    worker = socket.create_server(("127.0.0.1", 0))
    other = socket.create_server(("127.0.0.2", 0))
    worker_port = worker.getsockname()[1]
    opened = packets.open_filtered(rpc_turns.filter_program("127.0.0.1"), 1 << 20)
    assert opened is not None
    sock, _ = opened
    try:
        while True:  # whatever passed before the filter was attached
            try:
                sock.recv(1)
            except BlockingIOError:
                break
        # The other connection from another address too (loopback would pick 127.0.0.1).
        for server, source, turns in ((worker, "127.0.0.1", 3), (other, "127.0.0.3", 2)):
            with socket.create_connection(server.getsockname(),
                                          source_address=(source, 0)) as conn:
                peer, _ = server.accept()
                with peer:
                    for end in (conn, peer):
                        end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    for _ in range(turns):
                        conn.sendall(b"q" * 100)
                        assert peer.recv(100) == b"q" * 100
                        peer.sendall(b"a" * 50)
                        assert conn.recv(64) == b"a" * 50
        time.sleep(0.05)
        read = []
        while True:
            try:
                packet, _, _, where = sock.recvmsg(rpc_turns.SNAP_BYTES, packets.STAMP_SPACE)
            except BlockingIOError:
                break
            read.append((packet, where))
    finally:
        packets.close_soon(sock)
        worker.close()
        other.close()
    # The three turns' six segments, each once, as they arrived: no handshake, no pure
    # ACK, no outgoing copy, nothing of the connection to 127.0.0.2.
    assert sorted(data_bytes(packet) for packet, _ in read) == [50] * 3 + [100] * 3, read
    assert all(where[2] == packets.PACKET_HOST for _, where in read)
    counter = rpc_turns.TurnCounter.__new__(rpc_turns.TurnCounter)
    counter.addr, counter.ports = socket.inet_aton("127.0.0.1"), {worker_port}
    counter.events, counter.dropped = [counter._event(p, i) for i, (p, _) in enumerate(read)], 0
    assert counter.turns(-1, len(read)) == 3
