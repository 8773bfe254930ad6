"""Round trips per decoded token, measured: sweep the link's added delay, fit decode
ms/token against the measured request-response latency. The slope is the number of
blocking round trips A makes to its workers per decode step.

The decode figure is each request's median inter-token gap (the typical step).
Each sweep point is its own emulated link on the embedded pair (a veth with that delay)
or, on a real pair, the pair's baseline link behind a delay relay on host A (no netem,
no root: lab.relayed); its request-response latency measured with the probe through
exactly the path the RPC traffic takes (relay included), and its own launch with
`workers` RPC workers on B (chained: A hands the activations from one to the next).
Every point's launch stays up while the sweep runs in rounds: each round sends one
single-stream request to every point, seconds apart, so that a machine that slows down
(another process, steal) slows every point of the round alike and the fit takes each
point's difference from the lowest delay within a round. The x axis is measured, not
configured, so the relay's own cost and any emulation error are inside it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, TypedDict

import httpx
import numpy as np
import pandas as pd

from splitbench import backends, pairs
from splitbench.backends import Backend, Launch
from splitbench.backends.base import toolchain_failure
from splitbench.cells import sweep_fit
from splitbench.contracts.records import ModelInfo, ToolchainRecord
from splitbench.contracts.slices import ServerSettings, SweepSlice
from splitbench.infra import interference, parquet_io, procs, turns, wakeup
from splitbench.infra.hosts import HostError, host_from_spec
from splitbench.links import lab, relay, verify
from splitbench.links.link import Link


def backend_of(spec: SweepSlice) -> Backend:
    """The backend whose round trips the sweep counts: its server settings' (a backend
    whose config section declares the sweep, `configuration.swept_models`)."""
    return backends.get(backends.name_of(spec["server"]))


def measure_rr_ms(link: Link, samples: int) -> float:
    """Median request-response time at 64 B from A to B's services (ms)."""
    with verify.latency_probe(link) as measure:
        return measure(samples) / 1000


class PointFacts(TypedDict, total=False):
    """What each row of a delay point carries: its sweep, delay, latency and how it is made."""

    pair: str
    model: str
    workers: int
    delay_ms: float | None
    rr_ms: float | None
    emulation_delay: str
    wakeup_latency_a: str
    wakeup_latency_b: str


class RequestFigures(TypedDict):
    """One request's figures (`one_request`); a row without one: round None and its error."""

    request: int
    round: int | None
    tokens: int
    error: str | None
    decode_ms_per_token: float | None
    step_ms_median: float | None
    server_decode_ms_per_token: float | None
    turns_per_token: float | None  # request-response turns counted on A (rpc_turns.py)
    turn_wait_us: float | None  # a decode turn's median wait, A's send to B's answer


class SweepRow(PointFacts, RequestFigures, interference.InterferenceFigures, total=False):
    """A row of the sweep's Parquet: its point, launch and request, or why none was sent;
    and what else used the machines while the rounds ran (the same on every row)."""

    launch_id: str | None
    error_text: str


def one_request(server: Launch, link: Link, sweep: SweepSlice, pool: Any,
                round_: int) -> RequestFigures:
    """One single-stream request of a round; its row."""
    backend = backend_of(sweep)
    with link.host_a.entered():
        ids = backend.prompt(pool, sweep["prompt_tokens"], secrets.randbits(63))
        # The second witness: the RPC connections' turns, counted from their packets.
        rpc = backend.traffic(link, server)
        reply = backend.stream(server.url, [ids], sweep["n_predict"],
                               sweep["request_timeout_s"], rpc.at_first_token)[0]
        rpc.finish()
    traffic = rpc.figures([t["t_mono_ns"] for t in reply.tokens])
    figures = backend.request_row(reply, sweep["prompt_tokens"], sweep["n_predict"], True, 0.0)
    gaps = np.diff([t["t_ns"] for t in reply.tokens])
    return {
        "request": round_,
        "round": round_,
        "tokens": figures["generated_tokens"],
        "error": reply.error_type,
        "decode_ms_per_token": figures["decode_ms_per_token"],
        # The typical step: a sporadic stall (a re-allocation, the scheduler) must not
        # read as a fraction of a round trip.
        "step_ms_median": float(np.median(gaps) / 1e6) if gaps.size else None,
        "server_decode_ms_per_token": figures["server_decode_ms_per_token"],
        "turns_per_token": traffic["rpc_turns_per_token"],
        "turn_wait_us": traffic["rpc_turn_wait_us"],
    }


@dataclass
class Point:
    """One delay of the sweep: its link, what every row of it carries, and its launch
    (None where it did not come up: its one row says why)."""

    link: Link
    base: PointFacts
    server: Launch | None = None
    pool: Any = None


def sweep(spec: SweepSlice, model: ModelInfo, toolchain: ToolchainRecord,
          out: str) -> sweep_fit.SweepFit:
    """Run every delay point (spec: plan.roundtrips_slice); write rows, return the fit."""
    settings = spec["server"]
    rows: list[SweepRow] = []
    slots = [f"point{index}" for index in range(len(spec["delays_ms"]))]
    unusable = toolchain_failure(toolchain) or _relay_failure(spec)
    if unusable:
        # No llama.cpp on the pair (or no relay for a real one's delays): nothing to
        # count, and the row says why.
        rows.append({"pair": spec["pair"], "model": spec["model"],
                     "workers": spec["workers"], "delay_ms": None, "rr_ms": None,
                     "launch_id": None, "request": 0, "round": None, "tokens": 0,
                     "error": "launch_failed", "error_text": unusable,
                     "decode_ms_per_token": None, "step_ms_median": None,
                     "server_decode_ms_per_token": None})
    else:
        on_real = pairs.of_sweep(spec).sweep_on_baseline_link
        host_b = host_from_spec("b", spec["link"]["hosts"]["b"]) if on_real else None
        with turns.turn(spec["pair"], host_b):
            try:
                points = [_point(spec, settings, model, toolchain, index, delay, rows)
                          for index, delay in enumerate(spec["delays_ms"])]
                rows += _rounds(spec, [p for p in points if p.server is not None])
            finally:
                for slot in slots:
                    backend_of(spec).stop(spec["pair"], slot=slot)
                if on_real:  # the lab's relays are its links'; these were the sweep's
                    for index in range(len(slots)):
                        procs.stop(lab.relay_key(spec["pair"], f"rt{index}"))
    frame = pd.DataFrame(rows)
    result = sweep_fit.fit(frame)
    parquet_io.write(frame, out, {"config": spec, "settings": settings, "fit": result})
    return result


def _relay_failure(spec: SweepSlice) -> str | None:
    """Why a real pair's sweep cannot add its delays (no C compiler for the relay)."""
    if not pairs.of_sweep(spec).sweep_on_baseline_link:
        return None  # the lab makes its own links, relays included
    try:
        relay.binary()
    except relay.RelayBuildError as exc:
        return str(exc)
    return None


def _point(spec: SweepSlice, settings: ServerSettings, model: ModelInfo,
           toolchain: ToolchainRecord, index: int, delay: float,
           rows: list[SweepRow]) -> Point:
    """One delay: its link, its measured latency and its launch (kept up for the
    rounds). A launch that fails adds the row that says why."""
    link = pairs.of_sweep(spec).sweep_link(spec, index, delay)
    with wakeup.during(spec, {"a": link.host_a, "b": link.host_b}) as held:
        rr_ms = measure_rr_ms(link, spec["rr_samples"])
    point = Point(link, {"pair": spec["pair"], "model": spec["model"],
                         "workers": spec["workers"], "delay_ms": delay, "rr_ms": rr_ms,
                         "emulation_delay": link.emulation["delay"], **held})
    backend = backend_of(spec)
    try:
        point.server = backend.ensure(link, settings, model["path"], model["sha256"],
                                      toolchain, slot=f"point{index}")
        with link.host_a.entered():
            point.pool = backend.prompt_pool(point.server.url)
    except (*backend.launch_errors, HostError, httpx.HTTPError) as exc:
        # A model that does not load has no round trips to count: a row that says why,
        # and the fit has nothing to fit (the table shows "—").
        print(f"delay {delay} ms: launch failed: {str(exc)[:300]}", flush=True)
        point.server = None
        rows.append({**point.base, "launch_id": None, "request": 0, "round": None,
                     "tokens": 0, "error": "launch_failed", "error_text": str(exc)[-2000:],
                     "decode_ms_per_token": None, "step_ms_median": None,
                     "server_decode_ms_per_token": None})
    return point


def _rounds(spec: SweepSlice, points: list[Point]) -> list[SweepRow]:
    """`requests` rounds, each one request to every point; the order turns by one point
    each round, so that no delay is always measured first or last."""
    rows: list[SweepRow] = []
    if not points:
        return rows
    hosts = {"a": points[0].link.host_a, "b": points[0].link.host_b}
    # Every point's launch and relay is recorded under the pair: the meter counts them
    # as the sweep's own, and everything else on the machines as interference.
    meter = interference.Meter(hosts)
    with wakeup.during(spec, hosts) as held, \
            meter.stretch(interference.own_processes(spec["pair"], [])):
        for round_ in range(spec["requests"]):
            turn = round_ % len(points)
            for point in points[turn:] + points[:turn]:
                row = one_request(point.server, point.link, spec, point.pool, round_)
                rows.append({**point.base, **held, "launch_id": point.server.launch_id,
                             **row})
    metered = meter.figures()
    rows = [{**row, **metered} for row in rows]
    for point in points:
        steps = [r["step_ms_median"] for r in rows if r["delay_ms"] == point.base["delay_ms"]
                 and r["step_ms_median"] is not None]
        print(f"delay {point.base['delay_ms']} ms: rr {point.base['rr_ms']:.3f} ms, decode "
              f"step {np.median(steps) if steps else float('nan'):.3f} ms "
              f"({len(steps)}/{spec['requests']} requests decoded)", flush=True)
    return rows
