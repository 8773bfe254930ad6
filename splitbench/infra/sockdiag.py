"""TCP counters of live connections, read in-process over netlink (sock_diag).

The same kernel counters `ss -tin` prints (tcp_info), without forking a process: a fork
during decode stalls the benchmark client for milliseconds on a small machine. The dump
is taken in the calling thread's network namespace (use `Host.entered()`).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_INFO = 2
TCP_ESTABLISHED = 1

# struct tcp_info offsets (include/uapi/linux/tcp.h); bytes_sent needs Linux >= 4.19.
TCP_INFO_FIELDS = {
    "bytes_acked": (120, "Q"),
    "bytes_received": (128, "Q"),
    "data_segs_in": (152, "I"),
    "data_segs_out": (156, "I"),
    "bytes_sent": (200, "Q"),
    "bytes_retrans": (208, "Q"),
}
_HEADER = struct.Struct("=IHHII")  # nlmsghdr
_SOCKID_SIZE = 48  # struct inet_diag_sockid: ports, addresses, interface, cookie
_DIAG_MSG = struct.Struct("=BBBB2s2s16s16sIQIIIII")  # inet_diag_msg


class SockDiagError(OSError):
    """The kernel refused a sock_diag request."""


def tcp_connections(family: int = socket.AF_INET) -> list[dict]:
    """Every established TCP connection of this namespace, with its tcp_info counters.

    A dump walks the kernel's whole established-hash table (milliseconds on a large
    machine, even when empty): use it to find connections, then `read` them one by one.
    """
    request = _request(family, b"\0" * _SOCKID_SIZE)
    with _netlink() as sock:
        return _exchange(sock, request, NLM_F_REQUEST | NLM_F_DUMP, family)


def read(connections: list[dict]) -> list[dict]:
    """Fresh counters of known connections by exact lookup (tens of microseconds);
    connections that have closed since (gone, or no longer established) are left out."""
    fresh: list[dict] = []
    with _netlink() as sock:  # one socket for every lookup: this runs mid-stream
        for connection in connections:
            try:
                found = _exchange(sock, _request(connection["family"], connection["sockid"]),
                                  NLM_F_REQUEST, connection["family"])
                fresh += [c for c in found if c["state"] == TCP_ESTABLISHED]
            except SockDiagError as exc:
                if exc.errno != errno.ENOENT:
                    raise
    return fresh


def connections_to(addr: str, port: int) -> list[dict]:
    """This namespace's established connections to addr:port (an IPv6 zone, `%eth0`, is
    not part of the kernel's socket id and is ignored)."""
    ip = ipaddress.ip_address(addr.split("%")[0])
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    return [c for c in tcp_connections(family) if c["dst"] == str(ip) and c["dport"] == port]


def connections_with(addr: str) -> list[dict]:
    """This namespace's established connections whose other end is addr, any port."""
    ip = ipaddress.ip_address(addr.split("%")[0])
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    return [c for c in tcp_connections(family) if c["dst"] == str(ip)]


def totals(connections: list[dict]) -> dict[str, int]:
    """Counters summed over connections (sent = towards the remote end)."""
    names = ("bytes_sent", "bytes_acked", "bytes_retrans", "bytes_received",
             "data_segs_out", "data_segs_in")
    return {name: sum(c.get(name, 0) for c in connections) for name in names}


def _request(family: int, sockid: bytes) -> bytes:
    return struct.pack("=BBBxI", family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1),
                       1 << TCP_ESTABLISHED) + sockid


def _netlink() -> socket.socket:
    return socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)


def _exchange(sock: socket.socket, request: bytes, flags: int, family: int) -> list[dict]:
    message = _HEADER.pack(_HEADER.size + len(request), SOCK_DIAG_BY_FAMILY, flags, 1, 0)
    sock.sendto(message + request, (0, 0))
    found: list[dict] = []
    while True:
        data = sock.recv(65536)
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, kind, _, _, _ = _HEADER.unpack_from(data, offset)
            body = data[offset + _HEADER.size:offset + length]
            if kind == NLMSG_DONE:
                return found
            if kind == NLMSG_ERROR:
                code = -struct.unpack_from("=i", body)[0]
                if code == 0:
                    return found
                raise SockDiagError(code, f"sock_diag: {os.strerror(code)}")
            found.append(_connection(body, family))
            offset += (length + 3) & ~3
        if not flags & NLM_F_DUMP:
            return found


def _connection(body: bytes, family: int) -> dict:
    (_, state, _, _, sport, dport, src, dst, _, _, _, _, _, _, _) = _DIAG_MSG.unpack_from(body)
    size = 4 if family == socket.AF_INET else 16
    connection = {
        "family": family,
        "sockid": body[4:4 + _SOCKID_SIZE],
        "src": str(ipaddress.ip_address(src[:size])),
        "dst": str(ipaddress.ip_address(dst[:size])),
        "sport": int.from_bytes(sport, "big"),
        "dport": int.from_bytes(dport, "big"),
        "state": state,
    }
    offset = _DIAG_MSG.size
    while offset + 4 <= len(body):
        length, kind = struct.unpack_from("=HH", body, offset)
        if length < 4:
            break
        if kind == INET_DIAG_INFO:
            info = body[offset + 4:offset + length]
            for name, (at, fmt) in TCP_INFO_FIELDS.items():
                if at + struct.calcsize(fmt) <= len(info):
                    connection[name] = struct.unpack_from("=" + fmt, info, at)[0]
        offset += (length + 3) & ~3
    return connection
