"""Decode bytes per token from the kernel's counters, when the reading thread loses its
CPU in the middle of a read (a busy machine), on a simulated clock and wire."""

from __future__ import annotations

import pytest

from splitbench.backends import client
from splitbench.infra import sockdiag, telemetry

LOGITS = 4104  # bytes host B sends back per token
US = 1000


class Wire:
    """Token k's logits cross at k ms and the token reaches the client 0.1 ms later. A
    read snapshots the counters when it starts, then takes the next of `durations`."""

    def __init__(self, durations_us: list[int]) -> None:
        self.now = 0
        self.durations = list(durations_us)

    def monotonic_ns(self) -> int:
        return self.now

    def read(self, connections: list[dict]) -> list[dict]:
        crossed = sum(1 for k in range(1, 33) if k * 1000 * US <= self.now)
        self.now += (self.durations.pop(0) if self.durations else 20) * US
        return [{"bytes_sent": 0, "bytes_received": crossed * LOGITS, "data_segs_out": 0,
                 "data_segs_in": crossed}]

    @staticmethod
    def arrivals() -> list[int]:
        return [k * 1000 * US + 100 * US for k in range(1, 33)]


def decode(monkeypatch: pytest.MonkeyPatch, durations_us: list[int]) -> dict:
    """One request of 32 tokens; the first token's read starts 50 us after it arrived
    and takes `durations_us` (the start and end reads are quick)."""
    wire = Wire([])
    monkeypatch.setattr(telemetry.time, "monotonic_ns", wire.monotonic_ns)
    monkeypatch.setattr(sockdiag, "read", wire.read)
    monkeypatch.setattr(sockdiag, "connections_to", lambda addr, port: [{"port": port}])
    traffic = telemetry.RpcTraffic("10.0.0.2", [50052])
    wire.now, wire.durations = 1150 * US, durations_us
    traffic.at_first_token()
    wire.now = 40_000 * US
    traffic.finish()
    return traffic.figures(wire.arrivals())


def test_an_interrupted_first_read_is_taken_again(monkeypatch):
    """Interrupted for 5 ms, the read's middle would fall after tokens 2 and 3 had come
    while its snapshot held neither's bytes: 31 tokens' bytes over 29 tokens. Read again,
    tokens and bytes share one edge."""
    figures = decode(monkeypatch, [5000, 20])
    assert figures["rpc_bytes_per_token_b_to_a"] == LOGITS
    assert figures["rpc_decode_tokens"] == 26  # tokens 7-32: after the second read


def test_an_interrupted_read_no_token_arrived_during_is_an_edge(monkeypatch):
    """Every read interrupted (another thread holding the CPU): the first one during
    which no token arrived still splits tokens from bytes, at its end."""
    figures = decode(monkeypatch, [5000, 600] + [5000] * 18)
    # Reads: 1.15-6.15 ms (tokens 2-6 arrive inside), 6.15-6.75 ms (none): the edge.
    assert figures["rpc_bytes_per_token_b_to_a"] == LOGITS
    assert figures["rpc_decode_tokens"] == 26  # tokens 7-32


def test_no_clean_first_read_gives_no_bytes_per_token(monkeypatch):
    # Each 1 ms read (the thread gets the CPU back every ms) holds one arrival.
    figures = decode(monkeypatch, [1000] * telemetry.FIRST_READ_TRIES)
    assert figures["rpc_bytes_per_token_b_to_a"] is None
    # The bytes themselves are still what crossed between the two snapshots.
    assert figures["rpc_decode_b_to_a_bytes"] > 0


def test_a_quick_first_read_is_taken_once(monkeypatch):
    figures = decode(monkeypatch, [20])
    assert figures["rpc_bytes_per_token_b_to_a"] == LOGITS
    assert figures["rpc_decode_tokens"] == 31  # tokens 2-32


def test_the_two_clocks_are_read_again_when_something_ran_between(monkeypatch):
    """A mono/wall pair read across a lost CPU would map every arrival that far off."""
    mono = iter([0, 5_000_000, 10_000_000, 10_001_000])
    wall = iter([1_000_000_000, 1_010_000_000])
    monkeypatch.setattr(client.time, "monotonic_ns", lambda: next(mono))
    monkeypatch.setattr(client.time, "time_ns", lambda: next(wall))
    now_mono, now_ns = client.clock_pair()
    assert (now_mono, now_ns) == (10_000_500, 1_010_000_000)
