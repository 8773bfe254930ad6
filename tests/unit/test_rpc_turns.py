"""The RPC turns and their waits, from packet events as the counter keeps them (the real
packets: tests/integration/test_packet_helper.py and the SSH and sweep tests); its
socket closed off the measuring thread."""

from __future__ import annotations

import socket
import threading

from splitbench.infra import packets
from splitbench.infra.rpc_turns import FROM_B, TO_B, TurnCounter


def counter(events: list[tuple[int, int, int]], dropped: int = 0) -> TurnCounter:
    made = TurnCounter.__new__(TurnCounter)  # no socket: the events are given
    made.events, made.dropped = events, dropped
    return made


def test_a_turn_waits_from_as_last_segment_to_the_end_of_bs_answer():
    """Until the answer's last segment: a large answer (a token's logits) crosses at the
    link's rate after its first byte, and that is the wire's time, not host A's."""
    events = [
        (100, 5000, TO_B), (130, 5000, TO_B),  # A's request in two segments
        (530, 5000, FROM_B), (560, 5000, FROM_B),  # B's answer in two: one turn, 430 ns
        (600, 6000, TO_B), (1600, 6000, FROM_B),  # another connection's turn: 1000 ns
        (1900, 7000, FROM_B),  # B speaks unasked on a connection A never wrote to: no turn
        (3000, 5000, TO_B), (3250, 5000, FROM_B),  # 250 ns, but after the window
        (3400, 5000, FROM_B), (3900, 5000, FROM_B),  # ...its answer ends at 3900: 900 ns
    ]
    assert counter(events).waits_ns(0, 2500) == [430, 1000]
    assert counter(events).turns(0, 2500) == 2
    assert counter(events).waits_ns(0, 5000) == [430, 1000, 900]
    # A turn is placed by its answer's start: one that starts inside the window counts
    # whole, its answer's end included wherever that falls.
    assert counter(events).waits_ns(500, 2500) == [430, 1000]
    assert counter(events).waits_ns(3000, 3300) == [900]


def test_a_dropped_packet_makes_the_turns_unknown_not_fewer():
    events = [(100, 5000, TO_B), (500, 5000, FROM_B)]
    assert counter(events, dropped=1).waits_ns(0, 1000) is None
    assert counter(events, dropped=1).turns(0, 1000) is None


def test_a_socket_closed_soon_is_closed_by_its_thread():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    packets.close_soon(sock)
    for thread in threading.enumerate():
        if thread.name == "packet-socket-close":
            thread.join(timeout=10)
    assert sock.fileno() == -1
