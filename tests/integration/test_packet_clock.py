"""The packet clock's bookkeeping on constructed segments: stream offsets from the
SYN-ACK, reads cut at segment boundaries, segments captured out of order, and
retransmissions (the real capture is tested against real servers in test_client.py and
test_cells_real.py)."""

from __future__ import annotations

import socket
import struct
import time
from collections import deque

from splitbench.backends import packet_clock
from splitbench.backends.packet_clock import PacketClock
from tests.conftest import needs_root

PORT = 40000
ISN = 0xFFFFFF00  # near the wrap: offsets must survive it


def segment(seq: int, payload: int, flags: int = 0x18) -> bytes:
    """IPv4 + TCP headers (no options) of a segment to PORT, as captured (truncated)."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 20 + payload, 0, 0, 64, 6, 0,
                     socket.inet_aton("127.0.0.1"), socket.inet_aton("127.0.0.1"))
    tcp = struct.pack("!HHIIBBHHH", 8080, PORT, seq & 0xFFFFFFFF, 0, 5 << 4, flags, 0, 0, 0)
    return ip + tcp


def clock_with(*segments: tuple[int, int, int]) -> PacketClock:
    """A clock fed a SYN-ACK and then (offset, length, t_ns) segments in that order."""
    clock = PacketClock.__new__(PacketClock)
    clock.first_seq, clock.segments, clock.captured = {}, {}, 0
    clock._record(segment(ISN, 0, flags=0x12), 0)
    for offset, length, t_ns in segments:
        clock._record(segment(ISN + 1 + offset, length), t_ns)
    return clock


def test_a_read_is_cut_where_segments_begin():
    clock = clock_with((0, 10, 100), (10, 5, 200), (15, 20, 300))
    pieces = clock.pieces(PORT, 0, b"a" * 10 + b"b" * 5 + b"c" * 3)
    assert pieces == [(b"a" * 10, 100), (b"b" * 5, 200), (b"c" * 3, 300)]
    # The rest of the third segment, read later, keeps that segment's time.
    assert clock.pieces(PORT, 18, b"c" * 17) == [(b"c" * 17, 300)]


def test_segments_captured_out_of_order_keep_their_own_times():
    clock = clock_with((0, 10, 100), (20, 10, 250), (10, 10, 240))
    assert [t for _, t in clock.pieces(PORT, 0, b"x" * 30)] == [100, 240, 250]


def test_a_retransmission_keeps_the_first_arrival():
    clock = clock_with((0, 10, 100), (10, 10, 200), (5, 10, 900))
    assert [t for _, t in clock.pieces(PORT, 0, b"x" * 20)] == [100, 200]


def test_bytes_no_captured_segment_carried_have_no_time():
    clock = clock_with((10, 10, 200))
    assert clock.pieces(PORT, 0, b"x" * 20) == [(b"x" * 10, None), (b"x" * 10, 200)]
    assert PacketClock.pieces(clock, PORT + 1, 0, b"y") == [(b"y", None)]


def test_merged_fills_only_the_gaps():
    merged = packet_clock._merged([[0, 10, 1], [20, 30, 2]], 5, 25, 3)
    assert merged == [[0, 10, 1], [10, 20, 3], [20, 30, 2]]
    assert isinstance(clock_with((0, 1, 1)).segments[PORT], deque)


@needs_root()
def test_the_kernel_filter_keeps_only_the_server_s_segments_to_us():
    """Real packets on loopback: segments from the server's address and port are kept,
    each once (not also as the outgoing copy loopback shows); the same port on another
    address, and our own segments to the server, never reach the clock."""
    servers = [socket.create_server((address, 0 if address == "127.0.0.1" else port))
               for address, port in (("127.0.0.1", 0),)]
    port = servers[0].getsockname()[1]
    servers.append(socket.create_server(("127.0.0.2", port)))
    clock = PacketClock.open("127.0.0.1", port)
    assert clock is not None
    try:
        for server in servers:
            with socket.create_connection(server.getsockname()) as conn:
                peer, _ = server.accept()
                with peer:
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    for _ in range(5):
                        conn.sendall(b"q" * 100)  # to the server: not kept
                        peer.sendall(b"a" * 200)  # from the server: kept (first only)
                        time.sleep(0.01)
        time.sleep(0.05)
        clock.drain()
        kept = {port_: list(queue) for port_, queue in clock.segments.items()}
        assert len(kept) == 1  # one connection's SYN-ACK: the 127.0.0.2 one is unseen
        (ranges,) = kept.values()
        assert clock.captured == 5 and sum(end - start for start, end, _ in ranges) == 1000
    finally:
        clock.close()
        for server in servers:
            server.close()
