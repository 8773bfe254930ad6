"""Request-response turns on the RPC connections, counted from their packets on host A.

A decode step of llama.cpp's RPC backend sends each worker its work and waits for the
answer: one turn per blocking round trip. Counted passively, from the packets host A
sends to and receives from the workers (a packet socket, as the packet clock's), it
needs no added delay, no root on host B and no sweep, and it is counted during the cells
themselves: a turn is a segment with data from B that follows one with data from A on
the same connection. Pure ACKs carry no data and are not counted (the kernel's filter
drops them).

On loopback (the lab's relay in front of B) each packet shows twice, as it leaves and as
it arrives; only arrivals are kept there (by the filter too). Stamps are the kernel's,
read when the release is over (the socket's buffer holds the packets meanwhile; a
dropped packet, counted by the kernel, makes the count unknown rather than wrong). A
socket from the packet helper holds no more than net.core.rmem_max (a few hundred
packets): a thread reads it while the release runs.
"""

from __future__ import annotations

import ipaddress
import select
import socket
import struct
import threading
import time
from collections.abc import Iterable

from splitbench.infra import packets
from splitbench.infra.packets import (
    ETH_P_IP,
    JEQ,
    LD_B_ABS,
    LD_B_IND,
    LD_H_ABS,
    LD_W_ABS,
    LDX_B_MSH,
    LDX_MEM,
    LOOPBACK_IFINDEX,
    LSH_K,
    PACKET_OUTGOING,
    RET,
    RSH_K,
    SKF_AD_IFINDEX,
    SKF_AD_PKTTYPE,
    SKF_AD_PROTOCOL,
    STAMP_SPACE,
    STORE,
    SUB_X,
)

SNAP_BYTES = 120  # the IPv4 and TCP headers: all a turn needs
# Each queued packet is charged its whole buffer (about 1 KiB): room for tens of
# thousands, a long cell's decode at several workers.
RECEIVE_BUFFER = HOLDS_A_RELEASE = 64 << 20
READ_EVERY_MS = 50  # how long the reading thread waits for a packet before it looks again
_IP = struct.Struct("!B11x4s4s")  # version/length, source, destination
_PORTS = struct.Struct("!HH")  # source and destination port
TO_B, FROM_B = 0, 1


def filter_program(addr: str) -> bytes:
    """Classic BPF: IPv4 TCP segments with data from or to `addr`, truncated to
    SNAP_BYTES; in the kernel, so that this process never reads the rest: pure ACKs
    (about half of an RPC connection's packets) and, on loopback, the copy of each
    packet as it leaves (the arrival is kept)."""
    address = int(ipaddress.IPv4Address(addr))
    # (code, k, label if true, label if false); a label names a later step; None: next.
    steps: list[tuple[int | str, int, str | None, str | None]] = [
        (LD_H_ABS, SKF_AD_PROTOCOL, None, None), (JEQ, ETH_P_IP, None, "drop"),
        (LD_B_ABS, 9, None, None), (JEQ, socket.IPPROTO_TCP, None, "drop"),
        (LD_W_ABS, 12, None, None), (JEQ, address, "ours", None),  # from addr
        (LD_W_ABS, 16, None, None), (JEQ, address, None, "drop"),  # or to addr
        ("ours", 0, None, None),
        (LD_W_ABS, SKF_AD_PKTTYPE, None, None), (JEQ, PACKET_OUTGOING, None, "data"),
        (LD_W_ABS, SKF_AD_IFINDEX, None, None), (JEQ, LOOPBACK_IFINDEX, "drop", None),
        ("data", 0, None, None),
        # data = IP total length - IP header - TCP header (its data offset x 4)
        (LDX_B_MSH, 0, None, None), (LD_B_IND, 12, None, None),
        (RSH_K, 4, None, None), (LSH_K, 2, None, None), (STORE, 0, None, None),
        (LD_H_ABS, 2, None, None), (SUB_X, 0, None, None), (LDX_MEM, 0, None, None),
        (SUB_X, 0, None, None), (JEQ, 0, "drop", None),
        (RET, SNAP_BYTES, None, None),
        ("drop", 0, None, None), (RET, 0, None, None),
    ]
    return packets.assemble(steps)


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
        self._reader: tuple[threading.Event, threading.Thread] | None = None

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
        # The kernel reports twice the buffer it gave.
        given = counter.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2
        if given < HOLDS_A_RELEASE:
            counter.read_meanwhile()
        return counter

    def read_meanwhile(self) -> None:
        """Read the socket in a thread until `finish`: its buffer is too small to hold a
        release's packets until the end."""
        stop = threading.Event()

        def read() -> None:
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            while not stop.is_set():
                if poller.poll(READ_EVERY_MS):
                    self.drain()

        self._reader = (stop, threading.Thread(target=read, name="rpc-turns", daemon=True))
        self._reader[1].start()

    def drain(self, keep: bool = True) -> None:
        """Read every packet waiting in the socket (the filter passes only segments with
        data, each once) and keep those of the counted connections."""
        while True:
            try:
                packet, ancillary, _, _ = self.sock.recvmsg(SNAP_BYTES, STAMP_SPACE)
            except BlockingIOError:
                break
            t_ns = packets.stamp_ns(ancillary)
            if not keep or t_ns is None:
                continue
            event = self._event(packet, t_ns - self.offset_ns)
            if event is not None:
                self.events.append(event)
        self.dropped += packets.drops(self.sock)

    def _event(self, packet: bytes, t_mono_ns: int) -> tuple[int, int, int] | None:
        version_length, source, destination = _IP.unpack_from(packet)
        ip_header = (version_length & 0x0F) * 4
        sport, dport = _PORTS.unpack_from(packet, ip_header)
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
        """What each of those turns waited: from A's last segment with data to the last
        segment of B's answer (every segment from B before A sends again), on the same
        connection (ns). The wire both ways, B's own work on it and the answer's
        transfer (a token's logits, 196 KB for a 49k vocabulary, cross at the link's
        rate after the first byte): between two links of one pair, B's work is the
        same, and the difference is what a turn pays on each link's wire, bandwidth
        included, so that what is left of the step is host A's own. A turn is placed by
        its answer's first segment: one that starts inside (start_ns, end_ns] counts
        whole. None where the kernel dropped packets."""
        if self.dropped:
            return None
        last: dict[int, tuple[int, int]] = {}  # port -> (direction, its last time)
        answering: dict[int, list[int]] = {}  # port -> [A's last send, B's last segment]
        turns = []
        for t_ns, port, direction in sorted(self.events):
            before = last.get(port)
            if direction == TO_B:
                answering.pop(port, None)
            elif before and before[0] == TO_B and start_ns < t_ns <= end_ns:
                answering[port] = [before[1], t_ns]
                turns.append(answering[port])
            elif port in answering:
                answering[port][1] = t_ns  # the answer goes on
            last[port] = (direction, t_ns)
        return [end - begin for begin, end in turns]

    def finish(self) -> None:
        """Read what the release left in the socket, and close it."""
        if self._reader is not None:
            stop, thread = self._reader
            stop.set()
            thread.join()
        self.drain()
        packets.close_soon(self.sock)
