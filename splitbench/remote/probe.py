"""Request-response latency over a link, with blocking sockets (never asyncio).

The server runs on host B and echoes each request back byte for byte; the client on
host A times round trips. Both speak a trivial framing: 4-byte big-endian length, then
the payload.

    python -m splitbench.remote.probe serve BIND_IP PORT
    python -m splitbench.remote.probe client IP PORT --sizes 64,16384 --samples 200   (JSON out)
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import struct
import sys
import threading
import time
from pathlib import Path

HEADER = struct.Struct("!I")
# The largest message echoed (the config's largest request-response size): a longer
# length from a client ends its connection instead of making the server allocate it.
MAX_MESSAGE = 1 << 20


def _recv_exact(sock: socket.socket, n: int, buf: bytearray) -> None:
    # MSG_WAITALL: one system call and one wake-up per message, not one per segment.
    view = memoryview(buf)[:n]
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got, socket.MSG_WAITALL)
        if k == 0:
            raise ConnectionError("peer closed")
        got += k


def _echo(conn: socket.socket) -> None:
    buf = bytearray(HEADER.size)
    payload = bytearray(MAX_MESSAGE)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while True:
            _recv_exact(conn, HEADER.size, buf)
            (size,) = HEADER.unpack(buf)
            if size > MAX_MESSAGE:
                raise ConnectionError(f"message of {size} bytes (at most {MAX_MESSAGE})")
            _recv_exact(conn, size, payload)
            conn.sendall(memoryview(payload)[:size])
    except (ConnectionError, OSError):
        conn.close()


def serve(bind: str, port: int) -> None:
    server = socket.create_server((bind, port))
    print(f"probe listening on {bind}:{port}", flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_echo, args=(conn,), daemon=True).start()


def measure(host: str, port: int, sizes: list[int], samples: int, seed: int = 0) -> dict:
    """Round-trip times in microseconds per payload size; sizes are interleaved at random."""
    order = [s for s in sizes for _ in range(samples)]
    random.Random(seed).shuffle(order)
    rtts: dict[int, list[float]] = {s: [] for s in sizes}
    reply = bytearray(max(sizes))
    payloads = {s: HEADER.pack(s) + bytes(s) for s in sizes}
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for size in sizes:  # warm up each size once (TCP windows, caches)
            sock.sendall(payloads[size])
            _recv_exact(sock, size, reply)
        for size in order:
            start = time.perf_counter_ns()
            sock.sendall(payloads[size])
            _recv_exact(sock, size, reply)
            rtts[size].append((time.perf_counter_ns() - start) / 1000)
    return {str(s): v for s, v in rtts.items()}


def server_argv(python: str, bind: str, port: int) -> list[str]:
    """The echo server as one self-contained command: this file's source, run by any
    Python 3 on the host, so host B needs no splitbench install."""
    return [python, "-c", Path(__file__).read_text(), "serve", bind, str(port)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("bind")
    s.add_argument("port", type=int)
    c = sub.add_parser("client")
    c.add_argument("host")
    c.add_argument("port", type=int)
    c.add_argument("--sizes", default="64,16384")
    c.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    if args.cmd == "serve":
        serve(args.bind, args.port)
    else:
        sizes = [int(s) for s in args.sizes.split(",")]
        json.dump(measure(args.host, args.port, sizes, args.samples), sys.stdout)


if __name__ == "__main__":
    main()
