"""How late does the delay relay release what it holds?

Starts the project's request-response probe on loopback behind the relay (`--delay-ms`
each way), measures `--samples` round trips `--repeats` times, each with a relay of its
own, and prints per repeat: the fastest round trip against twice the delay, and per
direction, from the relay's own log, the earliest any chunk left (never before due is
the relay's promise, which a test holds), the mean its timer's releases left after due,
and the mean they would have left without arming the timer early. Prints figures;
asserts nothing: lateness is the machine's load as much as the relay's.

    .venv/bin/python benchmarks/relay_timing.py [--repeats 20] [--samples 100] [--delay-ms 2]
Goal: the timer's releases on time on average (mean lateness under 20 us) on a quiet
machine, where the timer alone fires 20-50 us late.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
from pathlib import Path

import numpy as np

from splitbench.infra import procs, teardown
from splitbench.infra.hosts import Host
from splitbench.links import relay
from splitbench.remote import probe

LOCAL = Host("local")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def one_repeat(state: Path, number: int, delay_ms: float, samples: int) -> dict:
    """A probe behind a fresh relay: its fastest round trip and the relay's log figures."""
    target, front = free_port(), free_port()
    LOCAL.spawn([sys.executable, "-m", "splitbench.remote.probe", "serve", "127.0.0.1",
                 str(target)], role="probe", key=f"probe-{number}",
                log_path=state / f"probe-{number}.log")
    LOCAL.wait_listening("127.0.0.1", target, timeout=10)
    log = state / f"relay-{number}.log"
    LOCAL.spawn(relay.argv(delay_ms, [f"127.0.0.1:{front}=127.0.0.1:{target}"]),
                role="relay", key=f"relay-{number}", log_path=log)
    LOCAL.wait_listening("127.0.0.1", front, timeout=10)
    round_trips = probe.measure("127.0.0.1", front, [64], samples=samples)["64"]
    procs.stop(f"relay-{number}")
    procs.stop(f"probe-{number}")
    return {"fastest_us": min(round_trips), "released": relay.released_from_due(log)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--delay-ms", type=float, default=2.0)
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="relay-timing-"))
    os.environ["SPLITBENCH_STATE"] = str(state)
    rows = []
    try:
        print(f"relay at {args.delay_ms:g} ms each way, {args.samples} round trips a repeat")
        print("repeat  fastest RTT (us)  earliest (us)  timer mean late (us)  unarmed (us)")
        for number in range(args.repeats):
            row = one_repeat(state, number, args.delay_ms, args.samples)
            rows.append(row)
            earliest = " / ".join(f"{e:+.1f}" for e, _, _ in row["released"])
            mean = " / ".join(f"{m:+.1f}" for _, m, _ in row["released"])
            unarmed = " / ".join(f"{u:+.1f}" for _, _, u in row["released"])
            print(f"{number:>6}  {row['fastest_us']:>16.0f}  {earliest:>13}  {mean:>20}  "
                  f"{unarmed:>12}")
    finally:
        teardown.teardown()
    means = np.array([m for row in rows for _, m, _ in row["released"]])
    earliest = min(e for row in rows for e, _, _ in row["released"])
    fastest = np.array([row["fastest_us"] for row in rows])
    print(f"over {len(rows)} repeats: earliest release {earliest:+.1f} us from due; timer's "
          f"mean lateness median {np.median(means):.1f} us, max {means.max():.1f} us, "
          f"{(means > 20).sum()} of {means.size} directions over 20 us; fastest round trip "
          f"{fastest.min():.0f}-{fastest.max():.0f} us against {2000 * args.delay_ms:.0f}")


if __name__ == "__main__":
    main()
