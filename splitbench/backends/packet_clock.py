"""Each TCP segment's own arrival time, also when the reader is late.

A TCP socket cannot give it: segments that queue while the reader is not scheduled are
merged into one receive buffer that keeps the newest segment's stamp, so every token in
that buffer would share one time. A packet socket sees each segment separately, as the
network device hands it over, before TCP merges anything: with SO_TIMESTAMPNS every
packet carries its own stamp (on loopback, taken when the sender's packet enters the
device; on a NIC, when the driver delivers it), whenever this process gets round to
reading it.

`PacketClock` captures the segments a server sends to this process's connections (a
classic BPF filter in the kernel keeps only incoming TCP packets from the server's
address and port, truncated to their headers) and maps each one to its byte range in
its stream through the TCP sequence number, counted from the SYN-ACK's. The client then
cuts what a read returned at segment boundaries and stamps each piece with the arrival
of the segment that carried it. A packet socket needs CAP_NET_RAW: without it,
`PacketClock.open` returns None and the client falls back to per-read stamps.
"""

from __future__ import annotations

import ctypes
import ipaddress
import socket
import struct
from collections import deque

from splitbench.infra import packets
from splitbench.infra.packets import (
    ETH_P_IP,
    JEQ,
    LD_B_ABS,
    LD_H_ABS,
    LD_H_IND,
    LD_W_ABS,
    LDX_B_MSH,
    PACKET_HOST,
    RET,
    SKF_AD_PKTTYPE,
    SKF_AD_PROTOCOL,
    STAMP_SPACE,
)

# IPv4 header (up to 60 bytes) plus TCP header (up to 60): all a stamp needs.
SNAP_BYTES = 120
# Packets wait here until the client reads them; tokens are a few hundred bytes, but
# each queued packet is charged its whole buffer. 8 MiB holds thousands.
RECEIVE_BUFFER = 8 << 20
_IP_HEAD = struct.Struct("!BxH")  # version/header length, (TOS), total length
_TCP_HEAD = struct.Struct("!xxHI4xBB")  # (source port), destination port, seq, offset, flags
SYN = 0x02


def _merged(ranges: list[list[int]], start: int, end: int, t_ns: int) -> list[list[int]]:
    """Sorted, non-overlapping [start, end, t_ns] ranges with the part of [start, end)
    that none of them covers added, stamped t_ns."""
    out: list[list[int]] = []
    position = start
    for first, last, stamp in ranges:
        if position < end and first > position:
            out.append([position, min(end, first), t_ns])  # a gap before this range
        position = max(position, last)
        out.append([first, last, stamp])
    if position < end:
        out.append([position, end, t_ns])
    return sorted(out)


def filter_program(server_ip: str, server_port: int) -> bytes:
    """Classic BPF: keep incoming IPv4 TCP packets from server_ip:server_port, truncated
    to SNAP_BYTES; drop everything else in the kernel (this process never sees it)."""
    address = int(ipaddress.IPv4Address(server_ip))
    # (code, k) in order; a JEQ that fails jumps to the drop.
    steps = [
        (LD_H_ABS, SKF_AD_PROTOCOL), (JEQ, ETH_P_IP),      # IPv4
        (LD_W_ABS, SKF_AD_PKTTYPE), (JEQ, PACKET_HOST),    # addressed to this host
        (LD_B_ABS, 9), (JEQ, socket.IPPROTO_TCP),          # TCP
        (LD_W_ABS, 12), (JEQ, address),                    # from the server's address
        (LDX_B_MSH, 0), (LD_H_IND, 0), (JEQ, server_port),  # from the server's port
        (RET, SNAP_BYTES),
    ]
    labelled = [(code, k, None, "drop" if code == JEQ else None) for code, k in steps]
    return packets.assemble([*labelled, ("drop", 0, None, None), (RET, 0, None, None)])


class PacketClock:
    """Arrival time of every segment the server sends to this process's connections,
    by client port and stream offset. Open it before connecting: a stream's offsets
    count from its SYN-ACK."""

    def __init__(self, sock: socket.socket, program: ctypes.Array) -> None:
        self.sock = sock
        self._program = program  # the kernel copied it; kept for clarity of ownership
        # client port -> first data sequence number (the SYN-ACK's + 1)
        self.first_seq: dict[int, int] = {}
        # client port -> segments not yet consumed: [start offset, end offset, t_ns]
        self.segments: dict[int, deque[list[int]]] = {}
        self.captured = 0

    @classmethod
    def open(cls, server_ip: str, server_port: int) -> PacketClock | None:
        """A clock for connections to server_ip:server_port; None where this process
        may not open a packet socket (no CAP_NET_RAW) or the address is not IPv4."""
        try:
            ipaddress.IPv4Address(server_ip)
        except ValueError:
            return None
        opened = packets.open_filtered(filter_program(server_ip, server_port),
                                       RECEIVE_BUFFER)
        if opened is None:  # no CAP_NET_RAW, or no packet sockets here: per-read stamps
            return None
        sock, program = opened
        clock = cls(sock, program)
        # Packets that came in before the filter was attached are not the server's.
        clock.drain(keep=False)
        clock.drops()
        return clock

    def drain(self, keep: bool = True) -> None:
        """Read every packet waiting in the socket and record its segment."""
        receive = self.sock.recvmsg
        while True:
            try:
                packet, ancillary, _, _ = receive(SNAP_BYTES, STAMP_SPACE)
            except BlockingIOError:
                return
            t_ns = packets.stamp_ns(ancillary)
            if keep and t_ns is not None:
                self._record(packet, t_ns)

    def _record(self, packet: bytes, t_ns: int) -> None:
        version_length, total = _IP_HEAD.unpack_from(packet)
        ip_header = (version_length & 0x0F) * 4
        port, seq, offset, flags = _TCP_HEAD.unpack_from(packet, ip_header)
        if flags & SYN:
            self.first_seq[port] = (seq + 1) & 0xFFFFFFFF
            self.segments[port] = deque()
            return
        length = total - ip_header - (offset >> 4) * 4
        first = self.first_seq.get(port)
        if length <= 0 or first is None:
            return  # a pure ACK, or a stream whose start this clock did not see
        start = (seq - first) & 0xFFFFFFFF
        queue = self.segments[port]
        end = start + length
        self.captured += 1
        if not queue or start >= queue[-1][1]:
            queue.append([start, end, t_ns])  # in order: the usual case
            return
        # Out of order: segments leave the sender from two CPUs when an ACK processed
        # on the reader's CPU releases queued data while the sender's own CPU sends
        # too, so the device hands them over out of sequence. Insert the bytes no
        # earlier segment carried (a retransmission keeps its first arrival).
        self.segments[port] = deque(_merged(list(queue), start, end, t_ns))

    def pieces(self, port: int, offset: int, data: bytes) -> list[tuple[bytes, int | None]]:
        """data (stream bytes from `offset`) cut where segments begin, each piece with
        its segment's arrival time; None for bytes no captured segment carried."""
        queue = self.segments.get(port)
        if not queue:
            return [(data, None)]
        head = queue[0]
        if head[0] == offset and head[1] == offset + len(data):
            queue.popleft()  # the usual case: the read returned exactly one segment
            return [(data, head[2])]
        out: list[tuple[bytes, int | None]] = []
        position, end = offset, offset + len(data)
        while position < end:
            while queue and queue[0][1] <= position:
                queue.popleft()
            if not queue or queue[0][0] > position:
                stop = end if not queue else min(end, queue[0][0])
                out.append((data[position - offset:stop - offset], None))
            else:
                stop = min(end, queue[0][1])
                out.append((data[position - offset:stop - offset], queue[0][2]))
            position = stop
        return out

    def drops(self) -> int:
        """Packets the kernel dropped for this socket since the last call (a full
        buffer): their bytes fall back to the read's stamp."""
        return packets.drops(self.sock)

    def close(self) -> None:
        packets.close_soon(self.sock)
