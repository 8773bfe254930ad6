"""How precisely and how cheaply does the benchmark client timestamp streamed tokens?

A synthetic streaming server (a separate, single-threaded process on loopback) emits
tokens at known instants, 4 streams x 2,000 tokens/s, each event carrying its own send time (in the
`tokens` field, where a real server puts the token id). The real client
(`splitbench.client.run_concurrent`) reads them; the error is its arrival timestamp
minus the send time. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/client_overhead.py [--streams 4] [--rate 2000] [--tokens 4000]
Goals (issue 4): p99 error under 200 us, client CPU under 30 us per token. Then, for a
finished run's cells (--results, default results/), the median gap between the harness's
decode ms/token and the server's own (goal: within 1%).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import socket
import time
from pathlib import Path

import numpy as np

from splitbench import client, tables
from splitbench.testing import read_request


def serve(port: int, rate: float, streams: int) -> None:
    """All streams from one thread: a threaded server's GIL hand-offs (up to 5 ms) would
    land between an event's stamp and its send and count as client error."""
    listener = socket.create_server(("127.0.0.1", port))
    conns = []
    for _ in range(streams):
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns.append((conn, read_request(conn)["n_predict"]))
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
    start = time.monotonic()
    for i in range(max(n for _, n in conns)):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        for conn, n in conns:
            if i < n:
                event = {"tokens": [time.time_ns()], "tokens_predicted": i + 1, "stop": False}
                conn.sendall(f"data: {json.dumps(event)}\n\n".encode())
    for conn, n in conns:
        final = {"stop": True, "timings": {"predicted_n": n}}
        conn.sendall(f"data: {json.dumps(final)}\n\n".encode())
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--rate", type=float, default=2000, help="tokens/s per stream")
    parser.add_argument("--tokens", type=int, default=4000, help="tokens per stream")
    parser.add_argument("--results", type=Path, default=Path("results"),
                        help="a finished run's results, for the harness-vs-server figure")
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = multiprocessing.Process(target=serve, args=(port, args.rate, args.streams),
                                     daemon=True)
    server.start()
    time.sleep(0.5)
    try:
        usage0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        replies = client.run_concurrent(f"http://127.0.0.1:{port}", [[1]] * args.streams,
                                        args.tokens, timeout=120)
        usage, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - wall0
    finally:
        server.terminate()
        server.join()
    errors = np.array([(t["t_ns"] - t["token_id"]) / 1000 for r in replies for t in r.tokens])
    tokens = len(errors)
    print(f"{args.streams} streams x {args.rate:.0f} tok/s, {tokens} tokens in {wall:.2f} s")
    print(f"timestamp error: p50 {np.percentile(errors, 50):.1f} us, "
          f"p99 {np.percentile(errors, 99):.1f} us, max {errors.max():.1f} us (goal p99 < 200)")
    user = (usage.ru_utime - usage0.ru_utime) / tokens * 1e6
    kernel = (usage.ru_stime - usage0.ru_stime) / tokens * 1e6
    print(f"client CPU: {user + kernel:.1f} us per token (goal < 30): "
          f"{user:.1f} in Python, {kernel:.1f} in the kernel (reads, polls, ACKs)")
    harness_against_server(args.results)


def harness_against_server(results: Path) -> None:
    """Median |harness - server| decode ms/token over a run's ok requests, in percent."""
    files = sorted(str(p) for p in (results / "cells").glob("*/*/*/*.requests.parquet"))
    if not files:
        print(f"no cells under {results}/cells: run `snakemake --cores 1 all` first")
        return
    columns = ["status", "decode_ms_per_token", "server_decode_ms_per_token"]
    rows = tables.read_requests(files, columns)
    rows = rows[(rows["status"] == "ok") & rows["server_decode_ms_per_token"].notna()]
    gap = ((rows["decode_ms_per_token"] - rows["server_decode_ms_per_token"]).abs()
           / rows["server_decode_ms_per_token"] * 100)
    print(f"harness vs server decode ms/token over {len(rows)} ok requests in {results}: "
          f"median gap {gap.median():.2f}% (goal < 1%)")
    for conc, part in gap.groupby(rows["conc"]):
        print(f"  concurrency {conc}: median {part.median():.2f}%, max {part.max():.2f}%")


if __name__ == "__main__":
    main()
