"""A userspace TCP relay that adds a fixed one-way delay in each direction.

Used where the kernel has no netem. Each direction has a reader that timestamps every
chunk as it arrives and a writer that releases it `delay` later, so throughput is kept
(chunks are pipelined) while every byte is held back by the same amount. Timing uses
blocking sockets and threads, never asyncio (asyncio adds ~150-200 us per hop here).

    python -m splitbench.relay --delay-ms 0.1 LISTEN_IP:PORT=TARGET_IP:PORT [...]
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import socket
import threading
import time

CHUNK = 256 * 1024


def _pump(src: socket.socket, dst: socket.socket, delay_s: float,
          done: threading.Semaphore) -> None:
    """Copy src to dst, each chunk held back by delay_s; pass a half-close on."""
    held: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

    def read() -> None:
        try:
            while data := src.recv(CHUNK):
                held.put((time.monotonic() + delay_s, data))
        except OSError:
            pass
        held.put((0.0, b""))

    threading.Thread(target=read, daemon=True).start()
    try:
        while True:
            due, data = held.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            dst.sendall(data)
    except OSError:
        pass
    # Only this direction is finished: the peer may still be sending the other way.
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)
    if not done.acquire(blocking=False):  # the other direction finished first
        for sock in (src, dst):
            sock.close()


def _serve(listen: tuple[str, int], target: tuple[str, int], delay_s: float) -> None:
    server = socket.create_server(listen, reuse_port=False)
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection(target, timeout=10)
        except OSError:
            client.close()
            continue
        upstream.settimeout(None)
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        first_done = threading.Semaphore(1)
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(src, dst, delay_s, first_done),
                             daemon=True).start()


def _endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("mapping", nargs="+", help="LISTEN_IP:PORT=TARGET_IP:PORT")
    args = parser.parse_args()
    threads = []
    for mapping in args.mapping:
        listen, target = mapping.split("=")
        thread = threading.Thread(
            target=_serve,
            args=(_endpoint(listen), _endpoint(target), args.delay_ms / 1000),
            daemon=True,
        )
        thread.start()
        threads.append(thread)
    print("relay ready", flush=True)
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
