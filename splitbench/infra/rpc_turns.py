"""Request-response turns on the RPC connections, counted from their packets on host A.

A decode step of llama.cpp's RPC backend sends each worker its work and waits for the
answer: one turn per blocking round trip. Counted passively, from the packets host A
sends to and receives from the workers (a packet socket, as the packet clock's), it
needs no added delay, no root on host B and no sweep, and it is counted during the cells
themselves: a turn is a segment with data from B that follows one with data from A on
the same connection. Pure ACKs carry no data and are not counted.

On loopback (the lab's relay in front of B) each packet shows twice, as it leaves and as
it arrives; only arrivals are kept there. Stamps are the kernel's, read when the release
is over (the socket's buffer holds the packets meanwhile; a dropped packet, counted by
the kernel, makes the count unknown rather than wrong).
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import time
from collections.abc import Iterable

from splitbench.infra import packets
from splitbench.infra.packets import (
    ETH_P_IP,
    JEQ,
    LD_B_ABS,
    LD_H_ABS,
    LD_W_ABS,
    PACKET_OUTGOING,
    RET,
    SKF_AD_PROTOCOL,
    STAMP_SPACE,
)

SNAP_BYTES = 120  # the IPv4 and TCP headers: all a turn needs
# Each queued packet is charged its whole buffer (about 1 KiB): room for tens of
# thousands, a long cell's decode at several workers.
RECEIVE_BUFFER = 64 << 20
_IP = struct.Struct("!BxH8x4s4s")  # version/length, total length, source, destination
_PORTS = struct.Struct("!HH8xB")  # source and destination port, (seq, ack), data offset
TO_B, FROM_B = 0, 1


def filter_program(addr: str) -> bytes:
    """Classic BPF: IPv4 TCP packets from or to `addr`, truncated to SNAP_BYTES."""
    address = int(ipaddress.IPv4Address(addr))
    keep, drop = 8, 9  # the indexes of the two returns below (jumps count from the next)
    steps = [
        (LD_H_ABS, SKF_AD_PROTOCOL, 0, drop - 1), (JEQ, ETH_P_IP, 0, drop - 2),
        (LD_B_ABS, 9, 0, 0), (JEQ, socket.IPPROTO_TCP, 0, drop - 4),
        (LD_W_ABS, 12, 0, 0), (JEQ, address, keep - 6, 0),  # from addr
        (LD_W_ABS, 16, 0, 0), (JEQ, address, keep - 8, drop - 8),  # to addr
    ]
    program = b"".join(packets.instruction(code, jt, jf if code == JEQ else 0, k)
                       for code, k, jt, jf in steps)
    return program + packets.instruction(RET, 0, 0, SNAP_BYTES) + packets.instruction(
        RET, 0, 0, 0)


class TurnCounter:
    """Turns on A's connections to addr at `ports`, between two monotonic times."""

    def __init__(self, sock: socket.socket, program: object, addr: str,
                 ports: Iterable[int]) -> None:
        self.sock, self._program = sock, program
        self.addr = socket.inet_aton(addr)
        self.ports = set(ports)
        # CLOCK_REALTIME (the stamps') minus CLOCK_MONOTONIC (the client's times).
        self.offset_ns = time.time_ns() - time.monotonic_ns()
        self.events: list[tuple[int, int, int]] = []  # (t_mono_ns, A's port, direction)
        self.dropped = 0

    @classmethod
    def open(cls, addr: str, ports: Iterable[int]) -> TurnCounter | None:
        """A counter for A's connections to addr:ports; None where this process may not
        open a packet socket (no CAP_NET_RAW) or the address is not IPv4."""
        try:
            ipaddress.IPv4Address(addr)
        except ValueError:
            return None
        opened = packets.open_filtered(filter_program(addr), RECEIVE_BUFFER)
        if opened is None:
            return None
        counter = cls(*opened, addr, ports)
        counter.drain(keep=False)  # from before the filter: not these connections'
        packets.drops(counter.sock)
        return counter

    def drain(self, keep: bool = True) -> None:
        """Read every packet waiting in the socket and keep those that carry data."""
        while True:
            try:
                packet, ancillary, _, where = self.sock.recvmsg(SNAP_BYTES, STAMP_SPACE)
            except BlockingIOError:
                break
            t_ns = packets.stamp_ns(ancillary)
            if not keep or t_ns is None:
                continue
            if where[0] == "lo" and where[2] == PACKET_OUTGOING:
                continue  # loopback shows each packet leaving and arriving: count arrivals
            event = self._event(packet, t_ns - self.offset_ns)
            if event is not None:
                self.events.append(event)
        self.dropped += packets.drops(self.sock)

    def _event(self, packet: bytes, t_mono_ns: int) -> tuple[int, int, int] | None:
        version_length, total, source, destination = _IP.unpack_from(packet)
        ip_header = (version_length & 0x0F) * 4
        sport, dport, offset = _PORTS.unpack_from(packet, ip_header)
        if total - ip_header - (offset >> 4) * 4 <= 0:
            return None  # a pure ACK
        if destination == self.addr and dport in self.ports:
            return t_mono_ns, sport, TO_B
        if source == self.addr and sport in self.ports:
            return t_mono_ns, dport, FROM_B
        return None

    def turns(self, start_ns: int, end_ns: int) -> int | None:
        """Turns whose answer from B arrived after start_ns and by end_ns (monotonic),
        among the packets read so far (`finish`); None where the kernel dropped packets
        (a turn could be missing)."""
        waits = self.waits_ns(start_ns, end_ns)
        return None if waits is None else len(waits)

    def waits_ns(self, start_ns: int, end_ns: int) -> list[int] | None:
        """What each of those turns waited: from A's last segment with data to B's first
        with data in answer, on the same connection (ns). The wire both ways and B's own
        work on it: between two links of one pair, B's work is the same, and the
        difference is what a turn pays on each link's wire, as decode's own messages
        cross it. None where the kernel dropped packets."""
        if self.dropped:
            return None
        last: dict[int, tuple[int, int]] = {}  # port -> (direction, its last time)
        waits = []
        for t_ns, port, direction in sorted(self.events):
            before = last.get(port)
            if direction == FROM_B and before and before[0] == TO_B and \
                    start_ns < t_ns <= end_ns:
                waits.append(t_ns - before[1])
            last[port] = (direction, t_ns)
        return waits

    def finish(self) -> None:
        """Read what the release left in the socket, and close it."""
        self.drain()
        self.sock.close()
