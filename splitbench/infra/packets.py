"""Packet sockets with a classic BPF filter and a kernel stamp on every packet: what the
packet clock (backends/packet_clock.py) and the RPC turn counter (rpc_turns.py) read.

A packet socket needs CAP_NET_RAW: root has it; a user who is not gets the socket from
the packet helper where root installed one (packet_helper.py), which shows only segments
of splitbench's ports; `open_filtered` returns None with neither. It listens
to every protocol (ETH_P_ALL: the device's taps, which see a packet before any protocol
does): bound to ETH_P_IP instead, it sat beside IP's own handler and missed segments
that TCP had already received.
"""

from __future__ import annotations

import contextlib
import ctypes
import socket
import struct
import threading

ETH_P_IP = 0x0800
ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26  # asm-generic/socket.h; the socket module does not name these
SO_TIMESTAMPNS = 35
SO_RCVBUFFORCE = 33
SOL_PACKET = 263
PACKET_STATISTICS = 6
# Classic BPF ancillary loads: the packet's protocol, and its type (PACKET_HOST =
# addressed to this host; loopback also shows each packet once more as PACKET_OUTGOING).
SKF_AD_PROTOCOL = -0x1000 + 0
SKF_AD_PKTTYPE = -0x1000 + 4
SKF_AD_IFINDEX = -0x1000 + 8
PACKET_HOST, PACKET_OUTGOING = 0, 4
LOOPBACK_IFINDEX = 1  # every network namespace's lo
# Classic BPF opcodes (linux/bpf_common.h).
LD_W_ABS, LD_H_ABS, LD_B_ABS, LD_H_IND, LD_B_IND = 0x20, 0x28, 0x30, 0x48, 0x50
LDX_B_MSH, LDX_MEM, STORE = 0xB1, 0x61, 0x02
RSH_K, LSH_K, SUB_X = 0x74, 0x64, 0x1C
JEQ, RET = 0x15, 0x06
# Ancillary room for one timespec, and its layout.
STAMP_SPACE = socket.CMSG_SPACE(16)
TIMESPEC = struct.Struct("qq")


def instruction(code: int, jump_true: int, jump_false: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jump_true, jump_false, k & 0xFFFFFFFF)


def assemble(steps: list[tuple[int | str, int, str | None, str | None]]) -> bytes:
    """A classic BPF program from (code, k, label if true, label if false) steps: a
    jump's labels name later steps written as (label, 0, None, None), which take no
    instruction; a label of None is the next instruction."""
    where: dict[str, int] = {}
    count = 0
    for code, _, _, _ in steps:
        if isinstance(code, str):
            where[code] = count
        else:
            count += 1
    program = b""
    for code, k, if_true, if_false in steps:
        if isinstance(code, str):
            continue
        after = len(program) // 8 + 1  # jumps count from the next instruction
        jumps = [0 if label is None else where[label] - after for label in (if_true, if_false)]
        program += instruction(code, *jumps, k)
    return program


def open_filtered(code: bytes, receive_buffer: int) -> tuple[socket.socket,
                                                             ctypes.Array] | None:
    """A non-blocking packet socket that keeps only what `code` (a classic BPF program)
    returns, stamps each packet (SO_TIMESTAMPNS) and queues up to `receive_buffer`
    bytes (through the packet helper: at most net.core.rmem_max, and only segments of
    splitbench's ports); with the program's buffer, which must outlive nothing (the
    kernel copies it) but is kept beside the socket for clarity. None where this process
    may not open one or the filter is refused (without its filter the socket would see
    every packet)."""
    program = ctypes.create_string_buffer(code, len(code))
    own = own_socket()
    sock = own if own is not None else helper_socket(code, receive_buffer)
    if sock is None:
        return None
    try:
        if own is not None:  # the helper's has the program already, locked
            sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER,
                            struct.pack("HL", len(code) // 8, ctypes.addressof(program)))
            with contextlib.suppress(PermissionError):
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, receive_buffer)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setblocking(False)
    except OSError:
        sock.close()
        return None
    return sock, program


def close_soon(sock: socket.socket) -> None:
    """Close a packet socket without waiting for it: the kernel releases one only after
    an RCU grace period (8-24 ms measured on a 2-core machine, a wait with nothing on the
    CPU), and a cell closes two per release, a paired one 80. A thread does the waiting."""
    threading.Thread(target=sock.close, name="packet-socket-close", daemon=True).start()


def own_socket() -> socket.socket | None:
    """A packet socket for every protocol, this process's own: None without CAP_NET_RAW
    or packet sockets."""
    try:
        return socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
    except OSError:
        return None


def helper_socket(code: bytes, receive_buffer: int) -> socket.socket | None:
    """The packet helper's socket, filtered by its check and `code`, where root installed
    one this user may run; None otherwise."""
    from splitbench.infra import packet_helper

    return packet_helper.open_socket(code, receive_buffer)


KEEP_NOTHING = instruction(RET, 0, 0, 0)


def stamp_ns(ancillary: list) -> int | None:
    """A packet's kernel stamp (CLOCK_REALTIME, ns) from recvmsg's ancillary data."""
    if not ancillary:
        return None
    seconds, nanos = TIMESPEC.unpack_from(ancillary[0][2])
    return seconds * 1_000_000_000 + nanos


def drops(sock: socket.socket) -> int:
    """Packets the kernel dropped for this socket since the last call (a full buffer)."""
    return struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))[1]
