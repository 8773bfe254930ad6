"""Around a cell: each host's sensors before, during (peak) and after it, and the bytes
that crossed the link on the RPC connections (kernel TCP counters)."""

from __future__ import annotations

import contextlib
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict

from splitbench.infra import rpc_turns, sockdiag
from splitbench.infra.hosts import Host, HostError
from splitbench.remote import sensors

# sensors.py needs only the standard library: its source runs on any host as is.
SENSORS_SOURCE = Path(sensors.__file__).read_text()

# One machine's sensor figures over a cell (`_figures`); "{side}" in a name is filled in
# per host side.
SensorFigures = TypedDict("SensorFigures", {
    "temp_{side}_before_c": float | None,
    "temp_{side}_after_c": float | None,
    "temp_{side}_peak_c": float | None,
    "load1_{side}_before": float | None,
    "gpu_{side}_temp_peak_c": float | None,
    "gpu_{side}_power_peak_w": float | None,
    "gpu_{side}_memory_peak_mib": float | None,
    "sensors_{side}": str,  # where the temperatures and GPU figures came from
    "sensor_readings_{side}": int,
    "cpu_pressure_{side}_peak_pct": float | None,
})


class SamplerFigures(TypedDict, total=False):
    """`Sampler.finish`: a SensorFigures per host side."""

    temp_a_before_c: float | None
    temp_a_after_c: float | None
    temp_a_peak_c: float | None
    load1_a_before: float | None
    gpu_a_temp_peak_c: float | None
    gpu_a_power_peak_w: float | None
    gpu_a_memory_peak_mib: float | None
    sensors_a: str
    sensor_readings_a: int
    cpu_pressure_a_peak_pct: float | None
    temp_b_before_c: float | None
    temp_b_after_c: float | None
    temp_b_peak_c: float | None
    load1_b_before: float | None
    gpu_b_temp_peak_c: float | None
    gpu_b_power_peak_w: float | None
    gpu_b_memory_peak_mib: float | None
    sensors_b: str
    sensor_readings_b: int
    cpu_pressure_b_peak_pct: float | None


def snapshot(host: Host | None = None) -> sensors.Reading:
    """One sensors reading on host (this machine when None)."""
    if host is None or not host.remote:
        return sensors.reading()  # a namespace shares the machine's sensors
    try:
        result = host.run([host.python, "-c", SENSORS_SOURCE], check=False)
        return json.loads(result.stdout.splitlines()[-1])
    except (HostError, IndexError, ValueError) as exc:  # a sensor gap, not a failed cell
        return {"temp_max_c": None, "temp_sources": f"unreadable: {str(exc)[-200:]}",
                "load1": None, "gpus": [], "gpu_sources": "unreadable"}


class Sampler:
    """Each machine's sensors read every `every_s` seconds by a small process started
    before the cell and stopped after it (one process when both hosts share this
    machine), plus a fresh reading at each end: before, after and peak."""

    def __init__(self, hosts: dict[str, Host], every_s: float = 1.0) -> None:
        self.machine_of = {side: host.ssh or "local" for side, host in hosts.items()}
        self.hosts = {self.machine_of[side]: host for side, host in reversed(hosts.items())}
        self.before = {key: snapshot(host) for key, host in self.hosts.items()}
        argv = ["-c", SENSORS_SOURCE, "--every", str(every_s)]
        # Readings go to a file, not a pipe: nobody reads during the cell, and a full
        # pipe would stop the sampler (and the peaks) after a few minutes.
        self.outputs = {key: tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in finish
                        for key in self.hosts}
        self.processes = {key: _start(host, argv, self.outputs[key])
                          for key, host in self.hosts.items()}

    def local_pids(self) -> list[int]:
        """The samplers running on this machine (part of the measurement)."""
        return [p.pid for key, p in self.processes.items()
                if p is not None and not self.hosts[key].remote]

    def finish(self) -> SamplerFigures:
        """Per host side: temp_{side}_before_c/after_c/peak_c, load, GPU and CPU-pressure
        peaks."""
        out: SamplerFigures = {}
        for key, process in self.processes.items():
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            with self.outputs[key] as output:
                output.seek(0)
                during = _readings(output.read())
            after = snapshot(self.hosts[key])
            figures = _figures(self.before[key], during, after)
            for side, machine in self.machine_of.items():
                if machine == key:
                    out.update({name.format(side=side): v for name, v in figures.items()})
        return out


def _start(host: Host, argv: list[str], output: Any) -> Any:
    """The sampler: here, or over SSH on the host's one connection (a channel of its own;
    Popen-like). None when the host cannot be reached: a sensor gap, not a failed cell
    (the readings before and after say why)."""
    if not host.remote:
        return subprocess.Popen([sys.executable, *argv], stdout=output,
                                stderr=subprocess.DEVNULL, text=True)
    try:
        return host.popen([host.python, *argv], stdout=output)
    except HostError:
        return None


def _readings(text: str) -> list[sensors.Reading]:
    """Every complete reading (a sampler stopped mid-line leaves a partial last one)."""
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def _figures(before: sensors.Reading, during: list[sensors.Reading],
             after: sensors.Reading) -> SensorFigures:
    readings = [before, *during, after]
    temps = [r["temp_max_c"] for r in readings if r.get("temp_max_c") is not None]
    gpus = [g for r in readings for g in r.get("gpus", [])]

    def peak(name: str) -> float | None:
        values = [g[name] for g in gpus if g.get(name) is not None]
        return max(values) if values else None

    return {
        "temp_{side}_before_c": before.get("temp_max_c"),
        "temp_{side}_after_c": after.get("temp_max_c"),
        "temp_{side}_peak_c": max(temps) if temps else None,
        "load1_{side}_before": before.get("load1"),
        "gpu_{side}_temp_peak_c": peak("temp_c"),
        "gpu_{side}_power_peak_w": peak("power_w"),
        "gpu_{side}_memory_peak_mib": peak("memory_used_mib"),
        "sensors_{side}": f"{before.get('temp_sources')}; {before.get('gpu_sources')}",
        "sensor_readings_{side}": len(readings),
        "cpu_pressure_{side}_peak_pct": _peak_pressure(readings),
    }


def _peak_pressure(readings: list[sensors.Reading]) -> float | None:
    """The highest CPU pressure (PSI "some", %) between two consecutive readings (about
    a second apart): a burst of other work that a cell's average would dilute."""
    points = [(c["t_mono"], c["psi_some_us"]) for r in readings
              if (c := r.get("cpu")) and c.get("psi_some_us") is not None]
    rates = [(b[1] - a[1]) / ((b[0] - a[0]) * 1e6) * 100
             for a, b in itertools.pairwise(points) if b[0] - a[0] >= 0.2]
    return round(max(rates), 1) if rates else None


# A sock_diag read is quick (docs/method.md); one that took well over that was
# interrupted. At the first token, where the read splits tokens from bytes, taking an
# interrupted read's middle as its time counted two tokens' bytes without the tokens
# beside busy loops.
TIGHT_READ_NS = 100_000
TIGHT_READ_PER_CONNECTION_NS = 40_000
FIRST_READ_TRIES = 20


class RpcFigures(TypedDict):
    """`RpcTraffic.figures`: the RPC connections' traffic in prefill and decode."""

    rpc_prefill_a_to_b_bytes: int | None
    rpc_prefill_b_to_a_bytes: int | None
    rpc_prefill_a_to_b_segs: int | None
    rpc_prefill_b_to_a_segs: int | None
    rpc_decode_a_to_b_bytes: int | None
    rpc_decode_b_to_a_bytes: int | None
    rpc_decode_a_to_b_segs: int | None
    rpc_decode_b_to_a_segs: int | None
    rpc_decode_tokens: int
    rpc_connections: int
    rpc_bytes_per_token_a_to_b: float | None
    rpc_bytes_per_token_b_to_a: float | None
    rpc_decode_turns: int | None  # request-response turns in decode (rpc_turns.py)
    rpc_turns_per_token: float | None
    rpc_turn_wait_us: float | None  # a decode turn's median wait, A's send to B's answer


class RpcTraffic:
    """Kernel TCP counters of A's connections to the RPC workers, read at the cell's
    start, at its first token (`at_first_token`, called from the client's loop) and at
    its end, each with the monotonic time of the read.

    Start to first token is prefill; first token to end is decode, and bytes per token
    divide by the tokens that arrived between those two reads. Exact at concurrency 1;
    at higher concurrency the other requests' prefill falls partly into "decode".
    Read in-process over netlink (sock_diag, tens of us) in the calling thread's namespace:
    forking `ss` here stalled the client for milliseconds.
    """

    def __init__(self, addr: str, ports: list[int] | None) -> None:
        """A's connections to addr at these ports, or (ports None) every connection with
        addr, whichever end opened it (vLLM's ranks connect both ways, on ports of their
        own choosing)."""
        self.connections = (sockdiag.connections_with(addr) if ports is None else
                            [c for port in ports for c in sockdiag.connections_to(addr, port)])
        self.first_reads: list[tuple[int, int, dict | None]] = []
        # Turns need the workers' ports (vLLM's ranks use ports of their own choosing).
        self.turns = rpc_turns.TurnCounter.open(addr, ports) if ports else None
        self.start = self._middle(self._read())
        self.end: tuple[int, dict | None] = (0, None)

    def _read(self) -> tuple[int, int, dict | None]:
        """The counters, bracketed by the monotonic time before and after the read."""
        before = time.monotonic_ns()
        fresh = sockdiag.read(self.connections)
        after = time.monotonic_ns()
        # A closed connection (a crashed worker) would make the sums go backwards.
        complete = self.connections and len(fresh) == len(self.connections)
        return before, after, sockdiag.totals(fresh) if complete else None

    @staticmethod
    def _middle(read: tuple[int, int, dict | None]) -> tuple[int, dict | None]:
        before, after, totals = read
        return (before + after) // 2, totals

    def tight_read_ns(self) -> int:
        """The longest an uninterrupted read of these connections takes."""
        return TIGHT_READ_NS + TIGHT_READ_PER_CONNECTION_NS * len(self.connections)

    def at_first_token(self) -> None:
        """Read until a read is quick (up to FIRST_READ_TRIES): an interrupted one (the
        thread lost its CPU) took its snapshot at an unknown moment inside it."""
        if self.first_reads:
            return
        for _ in range(FIRST_READ_TRIES):
            self.first_reads.append(self._read())
            before, after, _ = self.first_reads[-1]
            if after - before <= self.tight_read_ns():
                break

    def finish(self) -> None:
        self.end = self._middle(self._read())
        if self.turns is not None:
            self.turns.finish()

    def _first_edge(self, token_times_mono: list[int]) -> tuple[int, dict | None, bool]:
        """The first read that splits the tokens cleanly: a quick one (at its middle), or
        an interrupted one that no token arrived during (a later edge is as good, as long
        as tokens and bytes share it). sure=False: none did, and which tokens came after
        the snapshot would be a guess."""
        for before, after, totals in self.first_reads:
            if after - before <= self.tight_read_ns():
                return (before + after) // 2, totals, True
            if not any(before <= t <= after for t in token_times_mono):
                return after, totals, True
        return (*self._middle(self.first_reads[-1]), False) if self.first_reads else (
            0, None, False)

    def figures(self, token_times_mono: list[int]) -> RpcFigures:
        """Prefill and decode traffic each way, and decode bytes per token (None where
        no read at the first token split the tokens cleanly)."""
        (_, start), (t_end, end) = self.start, self.end
        t_first, first, sure = self._first_edge(token_times_mono)
        prefill, decode = traffic(start, first), traffic(first, end)
        decoded = sum(t_first <= t <= t_end for t in token_times_mono)
        out = {f"rpc_prefill_{k}": v for k, v in prefill.items()}
        out.update({f"rpc_decode_{k}": v for k, v in decode.items()})
        out["rpc_decode_tokens"] = decoded
        out["rpc_connections"] = len(self.connections)
        for way in ("a_to_b", "b_to_a"):
            total = decode[f"{way}_bytes"]
            out[f"rpc_bytes_per_token_{way}"] = (total / decoded if total and decoded and sure
                                                 else None)
        # Turns over the tokens after the first, between the same two edges as the bytes.
        waits = self.turns.waits_ns(t_first, t_end) if self.turns and sure else None
        turns = None if waits is None else len(waits)
        out["rpc_decode_turns"] = turns
        out["rpc_turns_per_token"] = turns / decoded if turns is not None and decoded else None
        out["rpc_turn_wait_us"] = statistics.median(waits) / 1000 if waits else None
        return out


def traffic(before: dict | None, after: dict | None) -> dict[str, int | None]:
    """Bytes and data segments that crossed the RPC connection between two snapshots."""
    if before is None or after is None:
        return {"a_to_b_bytes": None, "b_to_a_bytes": None, "a_to_b_segs": None,
                "b_to_a_segs": None}
    return {
        "a_to_b_bytes": after["bytes_sent"] - before["bytes_sent"],
        "b_to_a_bytes": after["bytes_received"] - before["bytes_received"],
        "a_to_b_segs": after["data_segs_out"] - before["data_segs_out"],
        "b_to_a_segs": after["data_segs_in"] - before["data_segs_in"],
    }
