"""How precisely and how cheaply does the benchmark client timestamp streamed tokens?

A synthetic streaming server (a separate, single-threaded process on loopback) emits
tokens at known instants, 4 streams x 2,000 tokens/s, each event carrying its own send time (in the
`tokens` field, where a real server puts the token id). The real client
(`splitbench.backends.client.run_concurrent`) reads them; the error is its arrival timestamp
minus the send time. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/client_overhead.py [--streams 4] [--rate 2000] [--tokens 4000]
As root it runs in a network namespace of its own whose loopback ACKs every segment at
once, as host A's does in the lab, and measures four cases: the reader running freely;
the reader stopped from outside for 20-50 ms every 80 ms (as on a busy machine); the
stopped reader with the delayed ACKs of a loopback as shipped (a sender waiting for an
ACK holds its next tokens back); and the stopped reader with per-read kernel stamps,
the fallback without CAP_NET_RAW.
Goals: p99 error under 200 us (also when starved), client CPU under 30 us per token. Then, for a
finished run's cells (--results, default results/), the median gap between the harness's
decode ms/token and the server's own (goal: within 1%).
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import multiprocessing
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from splitbench.backends.llamacpp import api
from splitbench.backends.packet_clock import PacketClock
from splitbench.links import lab
from splitbench.summary import cell_summary

# The synthetic streaming server is test code, kept out of the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.synthetic_server import read_request  # noqa: E402

CLONE_NEWNET = 0x40000000


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


def starve(parent: int, stop_s: tuple[float, ...], every_s: float) -> None:
    """Stop the parent (the client) for stop_s in turn, every every_s, until killed:
    a reader the scheduler does not run, as on a busy machine."""
    for i in itertools.count():
        time.sleep(every_s)
        os.kill(parent, signal.SIGSTOP)
        time.sleep(stop_s[i % len(stop_s)])
        os.kill(parent, signal.SIGCONT)


def private_loopback() -> bool:
    """Move this process into a network namespace of its own (as root) whose loopback
    route ACKs at once, as host A's in the lab does; False where that is not possible."""
    libc = ctypes.CDLL(None, use_errno=True)
    if os.geteuid() != 0 or libc.unshare(CLONE_NEWNET) != 0:
        return False
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    quick_acks(True)
    return True


def quick_acks(on: bool) -> None:
    subprocess.run(["ip", "route", "change", *lab.LOOPBACK_ROUTE, "quickack",
                    "1" if on else "0"], check=True)


def measure(args: argparse.Namespace, starved: bool, packet_clock: bool) -> dict:
    """One run of the client against the synthetic server: its timestamp errors (us),
    CPU per token, which clock stamped the tokens and how many tokens share a time."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = multiprocessing.Process(target=serve, args=(port, args.rate, args.streams),
                                     daemon=True)
    server.start()
    time.sleep(0.5)
    stopper = (multiprocessing.Process(target=starve, args=(os.getpid(), (0.02, 0.035, 0.05),
                                                            0.08), daemon=True)
               if starved else None)
    opened = PacketClock.open
    if not packet_clock:
        PacketClock.open = classmethod(lambda *a: None)
    try:
        if stopper:
            stopper.start()
        usage0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        replies = api.run_concurrent(f"http://127.0.0.1:{port}", [[1]] * args.streams,
                                        args.tokens, timeout=120)
        usage, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - wall0
    finally:
        PacketClock.open = opened
        if stopper:
            stopper.kill()
            stopper.join()
            os.kill(os.getpid(), signal.SIGCONT)
        server.terminate()
        server.join()
    errors = np.array([(t["t_ns"] - t["token_id"]) / 1000 for r in replies for t in r.tokens])
    shared = sum(len(r.tokens) - len({t["t_ns"] for t in r.tokens}) for r in replies)
    tokens = len(errors)
    return {"errors": errors, "tokens": tokens, "wall": wall, "shared": shared,
            "clock": "/".join(sorted({r.arrival_clock or "none" for r in replies})),
            "user": (usage.ru_utime - usage0.ru_utime) / tokens * 1e6,
            "kernel": (usage.ru_stime - usage0.ru_stime) / tokens * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--rate", type=float, default=2000, help="tokens/s per stream")
    parser.add_argument("--tokens", type=int, default=4000, help="tokens per stream")
    parser.add_argument("--results", type=Path, default=Path("results"),
                        help="a finished run's results, for the harness-vs-server figure")
    args = parser.parse_args()
    private = private_loopback()
    print(f"{args.streams} streams x {args.rate:.0f} tok/s x {args.tokens} tokens; "
          + ("in a private namespace whose loopback ACKs at once (as host A's in the lab)"
             if private else "on this machine's loopback (not root: delayed ACKs, no "
             "packet clock)"))
    # (name, starved, packet clock, quick ACKs)
    cases = [("reader runs freely", False, True, True),
             ("reader stopped 20-50 ms every 80 ms", True, True, True)]
    if private:
        cases += [("stopped, delayed ACKs (a loopback as shipped)", True, True, False),
                  ("stopped, per-read kernel stamps (no packet clock)", True, False, True)]
    print(f"{'case':52} {'clock':>8} {'p50 us':>8} {'p99 us':>8} {'max us':>9} "
          f"{'shared':>7} {'CPU us/token':>13}")
    for name, starved, packet_clock, quick in cases:
        if private:
            quick_acks(quick)
        m = measure(args, starved, packet_clock)
        e = m["errors"]
        print(f"{name:52} {m['clock']:>8} {np.percentile(e, 50):8.1f} "
              f"{np.percentile(e, 99):8.1f} {e.max():9.1f} {m['shared']:7d} "
              f"{m['user'] + m['kernel']:7.1f} ({m['user']:.0f}+{m['kernel']:.0f})")
    print("goals: p99 error < 200 us, also when stopped (packet clock, quick ACKs); CPU < "
          "30 us per token while the reader runs freely. shared: tokens stamped with the "
          "time of the token before them; CPU: Python + kernel")
    harness_against_server(args.results)


def harness_against_server(results: Path) -> None:
    """Median |harness - server| decode ms/token over a run's ok requests, in percent."""
    files = sorted(str(p) for p in (results / "cells").glob("*/*/*/*.requests.parquet"))
    if not files:
        print(f"no cells under {results}/cells: run `snakemake --cores 1 all` first")
        return
    columns = ["status", "decode_ms_per_token", "server_decode_ms_per_token"]
    rows = cell_summary.read_requests(files, columns)
    rows = rows[(rows["status"] == "ok") & rows["server_decode_ms_per_token"].notna()]
    gap = ((rows["decode_ms_per_token"] - rows["server_decode_ms_per_token"]).abs()
           / rows["server_decode_ms_per_token"] * 100)
    print(f"harness vs server decode ms/token over {len(rows)} ok requests in {results}: "
          f"median gap {gap.median():.2f}% (goal < 1%)")
    for conc, part in gap.groupby(rows["conc"]):
        print(f"  concurrency {conc}: median {part.median():.2f}%, max {part.max():.2f}%")


if __name__ == "__main__":
    main()
