"""One cell: N concurrent requests of one context length against one launch."""

from __future__ import annotations

import json
import secrets
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import httpx
import pandas as pd
from rich.console import Console

from splitbench import backends, pairs
from splitbench.backends import Launch, client, metrics
from splitbench.cells import stopping, warm_up
from splitbench.cells.layout import layout
from splitbench.contracts import registry, results
from splitbench.contracts.records import LaunchRecord, ModelInfo, ToolchainRecord
from splitbench.contracts.slices import CellSlice, LinkSlice, ServerSettings
from splitbench.infra import (
    archive,
    interference,
    parquet_io,
    precision,
    telemetry,
    turns,
    wakeup,
)
from splitbench.infra.hosts import HostError
from splitbench.links import verify


def backend_of(cell: CellSlice) -> backends.Backend:
    """The cell's backend: its model's (`models.<m>.backend`, llama.cpp by default)."""
    return backends.get((cell.get("model") or {}).get("backend", registry.DEFAULT))

TOKEN_COLUMNS = ["request_id", "token_index", "token_id", "t_ns", "t_mono_ns", "chunk_tokens",
                 "server_cum_prompt_ms", "server_cum_predicted_ms", "server_cum_predicted_n"]


def run(
    cell: CellSlice,
    link_spec: LinkSlice,
    model: ModelInfo,
    launch: LaunchRecord,
    toolchain_path: str,
    link_result: str,
    tokens_out: str,
    requests_out: str,
    reference_result: str | None = None,
) -> pd.DataFrame:
    """Measure one cell (`repeats` times, back to back) and write its token and request
    Parquet files; a previous measurement of the cell goes to the archive first.

    A cell with `paired` in its settings alternates, round by round, between the
    baseline link (its reference: `paired.reference` is that link's slice and
    `reference_result` its verification) and its own link, so that the two are measured
    on the same machine at the same time (paired.paired_deltas reads them)."""
    # A vLLM launch carries the pair's vLLM toolchain; llama.cpp's is the pair's record.
    toolchain = launch.get("toolchain") or json.loads(Path(toolchain_path).read_text())
    fingerprint = pd.read_parquet(link_result).iloc[0]["fingerprint"]
    if reference_result and pd.read_parquet(reference_result).iloc[0].get(
            "status") == "failed":
        # The baseline link failed verification: nothing to measure against round by
        # round, and no launch over it. The cell is measured alone.
        cell = {k: v for k, v in cell.items() if k != "paired"}
    if launch.get("status") == "failed":
        # The block's launch could not start the servers (the model, the pair's
        # toolchain or the link): its reason is this cell's result, written without
        # reaching the hosts (an unreachable host B must not cost the report). Trying
        # again would fail again: `--forcerun` what failed, then the launch record.
        measured = [_not_launched(cell, model, launch, fingerprint)]
    else:
        measured = _measured(cell, link_spec, model, launch, toolchain, fingerprint)
    failures = [m[2]["harness_error"] for m in measured]
    if all(failures):
        # Nothing was measured: fail the job, so that the next run measures it again.
        raise RuntimeError(f"every repeat of the cell failed in splitbench itself; the "
                           f"first:\n{failures[0]}")
    requests = pd.concat([m[0] for m in measured], ignore_index=True)
    tokens = pd.concat([m[1] for m in measured], ignore_index=True)
    provenance = {
        "config": {"cell": cell, "link": link_spec, "model": model},
        "launch": [m[2]["launch"] for m in measured],
        "toolchain": toolchain,
        "link_fingerprint": fingerprint,
        "telemetry": [m[2]["telemetry"] for m in measured],
    }
    if reference_result:
        provenance["reference_fingerprint"] = pd.read_parquet(
            reference_result).iloc[0]["fingerprint"]
    ident = _identity(tokens_out, link_spec)
    requests, tokens = results.stamped(requests, ident), results.stamped(tokens, ident)
    archive.supersede([tokens_out, requests_out])
    parquet_io.write(requests, requests_out, provenance)
    parquet_io.write(tokens, tokens_out, provenance)
    archive.keep([tokens_out, requests_out])
    return requests


class RepeatRecord(TypedDict):
    """What a repeat of the cell records beside its rows (the Parquet's provenance)."""

    launch: LaunchRecord | None
    telemetry: telemetry.SamplerFigures  # the hosts' sensors during the repeat
    # The error of splitbench itself that ended the repeat (None: the repeat ran).
    harness_error: str | None


def _measured(cell: CellSlice, link_spec: LinkSlice, model: ModelInfo,
              launch: LaunchRecord, toolchain: ToolchainRecord,
              fingerprint: str) -> list[tuple[pd.DataFrame, pd.DataFrame, RepeatRecord]]:
    """Every repeat of the cell against its launch: (requests, tokens, record) each."""
    link = pairs.ensure_link(link_spec)
    paired = cell.get("paired")
    reference = pairs.ensure_link(paired["reference"]) if paired else None
    measured = []
    # One job at a time drives a pair: another would relaunch its servers mid-cell.
    hosts = {"a": link.host_a, "b": link.host_b}
    with turns.turn(link.pair, link.host_b), wakeup.during(cell, hosts) as held:
        for repeat in range(cell.get("repeats", 1)):
            measured.append(_measure(cell, link, reference, model, launch, toolchain,
                                     fingerprint, repeat, held))
    return measured


def _not_launched(cell: CellSlice, model: ModelInfo, launch: LaunchRecord,
                  fingerprint: str) -> tuple[pd.DataFrame, pd.DataFrame, RepeatRecord]:
    """The rows of a cell whose block never launched: status load, the launch's reason."""
    run = Run(False, 0)
    run.shots = [(_failed(cell, "launch_failed",
                          f"the block's launch failed: {launch['error']}"), None)]
    rows, _ = _rows(cell, [run])
    fields = {"repeat": 0, "cell_status": metrics.cell_status([r["status"] for r in rows]),
              "cell_wall_ms": None, "cell_throughput_tps": None, "release_wall_ms": None,
              "release_throughput_tps": None,
              "link_fingerprint": fingerprint, **layout(model, launch)}
    requests = pd.DataFrame([{**r, **fields} for r in rows])
    tokens = pd.DataFrame(columns=TOKEN_COLUMNS).astype({"t_ns": "int64", "t_mono_ns": "int64"})
    tokens = tokens.merge(requests.drop(columns=["error_text"]), on="request_id", how="left")
    return requests, tokens, {"launch": launch, "telemetry": {}, "harness_error": None}


Shot = tuple[list[client.Reply], telemetry.RpcTraffic | None]
# Request-response samples per paired run (64 B each).
PAIRED_RR_SAMPLES = 50


@dataclass
class Run:
    """Requests sent to one launch: the cell's own link, or (in a paired cell) the
    baseline link measured alongside as its reference, in round `round`."""

    reference: bool
    round: int
    server: Launch | None = None
    shots: list[Shot] = field(default_factory=list)
    alive: bool = False
    harness_error: str | None = None
    # A paired run's link latency right after its requests: the 64 B request-response
    # p50 (us) along the RPC path, so that the prediction uses latency measured at the
    # same time as the decode it is compared with.
    rr64_us: float | None = None
    # Why its requests stopped (infra/precision.py); a paired cell's own runs carry the
    # cell's: the rounds' rule decides for both links.
    stopped: precision.Stopped | None = None

    def failed(self) -> bool:
        return any(r.error_type or r.http_status != 200 for replies, _ in self.shots
                   for r in replies)


def _identity(tokens_out: str, link_spec: LinkSlice) -> results.Identity:
    """What the rows are, from the output path Snakemake chose: a cell's pair, link,
    model, ctx, conc; an anchor's pair, model and when, on the link it ran on. Nothing
    for a one-off measurement written outside the results layout."""
    try:
        ident = results.identity(tokens_out)
    except ValueError:
        return {}
    ident.pop("repeat", None)  # the rows' own: one job measures every repeat
    return {**ident, "link": link_spec["link"]} if "when" in ident else ident


def _measure(cell: CellSlice, link: Any, reference: Any, model: ModelInfo,
             launch: LaunchRecord, toolchain: ToolchainRecord, fingerprint: str,
             repeat: int, held: dict[str, str]) -> tuple[pd.DataFrame, pd.DataFrame,
                                                        RepeatRecord]:
    """One measurement of the cell: request rows, token rows, provenance."""
    sampler = telemetry.Sampler({"a": link.host_a, "b": link.host_b})
    meter = interference.Meter({"a": link.host_a, "b": link.host_b})
    try:
        runs = _runs(cell, link, reference, model, launch, toolchain, sampler, meter)
    finally:
        sensors = sampler.finish()
    rows, replies = _rows(cell, runs)
    own = [r for r in rows if not r["reference"]]
    first = next((run for run in runs if not run.reference), runs[0])
    cell_fields = {
        "repeat": repeat,
        "cell_status": metrics.cell_status([r["status"] for r in own]),
        # Why the cell's requests stopped: its figures reached their targets, it reached
        # its ceiling, or a request failed (the last own run says, for a paired cell).
        "stopped": stopped_because(runs),
        "cell_wall_ms": metrics.wall_ms(own),
        "cell_throughput_tps": metrics.throughput_tps(own),
        "link_fingerprint": fingerprint,
        # The hotter host's figures, for tables; each host's are in the columns below.
        "temp_before_c": _hottest(sensors, "before"),
        "temp_after_c": _hottest(sensors, "after"),
        "temp_peak_c": _hottest(sensors, "peak"),
        **sensors,
        **meter.figures(),
        **held,
        **layout(model, first.server.record if first.server else None),
    }
    releases = metrics.release_figures(rows)
    requests = pd.DataFrame([{**r, **cell_fields,
                              **releases[(r["reference"], r["round"], r["shot"])]}
                             for r in rows])
    tokens = pd.DataFrame(
        [{**t, "request_id": r.request_id} for r in replies for t in r.tokens],
        columns=TOKEN_COLUMNS,
    ).astype({"t_ns": "int64", "t_mono_ns": "int64"})
    tokens = tokens.merge(requests.drop(columns=["error_text"]), on="request_id", how="left")
    record = {"launch": first.server.record if first.server else None, "telemetry": sensors,
              "harness_error": next((r.harness_error for r in runs if r.harness_error),
                                    None)}
    return requests, tokens, record


def stopped_because(runs: list[Run]) -> precision.Stopped | None:
    """Why the cell's requests stopped: a failure wherever one cut it short (a launch
    that failed, a reference or a link whose request failed or whose driving raised),
    else what its last own run says (a paired cell's rounds decide for both links)."""
    if any(run.harness_error or run.failed() for run in runs):
        return precision.FAILURE
    return next((run.stopped for run in reversed(runs) if not run.reference), None)


def _rows(cell: CellSlice, runs: list[Run]) -> tuple[list[dict[str, Any]],
                                                         list[client.Reply]]:
    """A row per request of every run (request ids run on across them), and the replies."""
    rows, replies = [], []
    for run in runs:
        for shot, (shot_replies, rpc) in enumerate(run.shots):
            traffic = rpc.figures([t["t_mono_ns"] for r in shot_replies for t in r.tokens]
                                  ) if rpc else {}
            for reply in shot_replies:
                reply.request_id = len(replies)
                replies.append(reply)
                row = backend_of(cell).request_row(reply, cell["prompt_tokens"], cell["n_predict"],
                                          run.alive, cell["crash_below_tps"])
                rows.append({**row, "reference": run.reference, "round": run.round,
                             "shot": shot, "rr64_us": run.rr64_us,
                             "launch_id": run.server.launch_id if run.server else None,
                             **traffic})
    return rows, replies


def _runs(cell: CellSlice, link: Any, reference: Any, model: ModelInfo,
          launch: LaunchRecord, toolchain: ToolchainRecord, sampler: telemetry.Sampler,
          meter: interference.Meter) -> list[Run]:
    """The cell's runs: one on its link; or, paired, rounds of the reference then the
    link, both launches alive side by side (requests a fraction of a second apart: a
    machine's speed can drift within seconds). A failure of the link ends the cell (the
    failure is its result); a reference that fails to launch, or fails in a round,
    leaves the link measured alone from then on."""
    own = Run(False, 0)
    settings = launch["settings"]
    own.server = _launch(own, cell, link, model, settings, toolchain)
    if own.server is None:
        return [own]
    if not cell.get("paired"):
        warm_up.release(backend_of(cell), cell, link, own.server)
        with meter.stretch(interference.own_processes(link.pair, sampler.local_pids())):
            _drive_run(own, cell, link, meter=meter)
        return [own]
    paired = cell["paired"]
    runs: list[Run] = []
    try:
        first = Run(True, 0)
        first.server = _launch(first, cell, reference, model, settings, toolchain,
                               slot="reference")
        if first.server is None:
            warm_up.release(backend_of(cell), cell, link, own.server)
            with meter.stretch(interference.own_processes(link.pair, sampler.local_pids())):
                _drive_run(own, cell, link, meter=meter)
            return [first, own]
        for target, server in ((reference, first.server), (link, own.server)):
            warm_up.release(backend_of(cell), cell, target, server)
        # Both launches and both latency probes are up: one stretch of the meter covers
        # every round.
        with verify.latency_probe(reference) as rr_reference, \
                verify.latency_probe(link) as rr_link, \
                meter.stretch(interference.own_processes(link.pair, sampler.local_pids())):
            sides = ((True, reference, rr_reference), (False, link, rr_link))
            for round_ in range(paired["rounds"]):
                # ABBA: the side that goes first alternates round by round, so that
                # whatever the first request of a round pays (a machine waking up, the
                # previous round's work still in its caches) falls on both links alike.
                for is_reference, target, latency in _round_order(sides, round_):
                    run = Run(is_reference, round_, first.server if is_reference
                              else own.server)
                    runs.append(run)
                    _drive_run(run, cell, target, paired["requests"])
                    if run.harness_error or (run.failed() and not is_reference):
                        return runs
                    run.rr64_us = latency(PAIRED_RR_SAMPLES)
                # The reference died: no more rounds to pair.
                if next(r for r in runs[-2:] if r.reference).failed():
                    alone = Run(False, round_ + 1, own.server)
                    _drive_run(alone, cell, link, meter=meter)
                    return [*runs, alone]
                if paired_known(cell, runs) and quiet(cell, link, meter):
                    next(r for r in runs[-2:] if not r.reference).stopped = precision.TARGET
                    return runs
    finally:
        backend_of(cell).stop(link.pair, slot="reference")
    return runs


def _round_order(sides: tuple, round_: int) -> tuple:
    """The two sides of a paired round in the order they run: the baseline first in
    even rounds, the link first in odd ones."""
    return sides if round_ % 2 == 0 else sides[::-1]


def _launch(run: Run, cell: CellSlice, link: Any, model: ModelInfo,
            settings: ServerSettings, toolchain: ToolchainRecord,
            slot: str = "") -> Launch | None:
    """Launch (or reuse) the servers; a launch that fails is the run's rows."""
    backend = backend_of(cell)
    try:
        return backend.ensure(link, settings, model["path"], model["sha256"], toolchain,
                              slot)
    except (*backend.launch_errors, HostError, httpx.HTTPError) as exc:
        run.shots = [(_failed(cell, "launch_failed", str(exc)), None)]
        return None


def _drive_run(run: Run, cell: CellSlice, link: Any, count: int | None = None,
               meter: interference.Meter | None = None) -> None:
    """Send the run's requests. A failure is the replies' status, not an exception: the
    other repeats are kept."""
    try:
        run.shots, run.stopped = _drive(cell, link, run.server, count, meter)
    except Exception as exc:  # noqa: BLE001 - becomes this repeat's rows
        text = "".join(traceback.format_exception(exc))[-2000:]
        run.shots = [(_failed(cell, type(exc).__name__, text), None)]
        run.harness_error = text
        run.stopped = precision.FAILURE
    with link.host_a.entered():
        run.alive = run.server.alive() and backend_of(cell).healthy(run.server.url)


def _failed(cell: CellSlice, error_type: str, text: str) -> list[client.Reply]:
    """Every request of a release, failed before it got a reply, stamped now."""
    now = time.time_ns()
    return [client.Reply(request_id=i, t_send_ns=now, t_end_ns=now, error_type=error_type,
                         error_text=capped(text)) for i in range(cell["concurrency"])]


def capped(text: str, limit: int = 2000) -> str:
    """At most `limit` characters: the first line (the reason) and the end (the last
    lines of a log), what lies between cut."""
    if len(text) <= limit:
        return text
    first, _, rest = text.partition("\n")
    first = first[: limit // 2]
    return f"{first}\n…\n{rest[-(limit - len(first) - 3):]}"


def known(cell: CellSlice, shots: Sequence[Shot]) -> bool:
    """Whether the cell's releases so far reached its precision targets: their rows
    made only at the rule's checkpoints."""
    if not stopping.looks(cell, len(shots)):
        return False
    return stopping.known(cell, [[_row(cell, reply) for reply in replies]
                                 for replies, _ in shots])


def paired_known(cell: CellSlice, runs: Sequence[Run]) -> bool:
    """Whether a paired cell's rounds so far pin its decode difference to its target."""
    rounds = {run.round for run in runs}
    if not stopping.looks_paired(cell, len(rounds)):
        return False
    decode: dict[tuple[int, bool], list[float]] = {}
    for run in runs:
        for replies, _ in run.shots:
            for reply in replies:
                row = _row(cell, reply)
                if row["status"] == "ok" and row["decode_ms_per_token"] is not None:
                    decode.setdefault((run.round, run.reference), []).append(
                        row["decode_ms_per_token"])
    return stopping.paired_known(cell, decode)


def _row(cell: CellSlice, reply: client.Reply) -> metrics.RequestRow:
    """A reply's row as the cell's file will hold it (the server taken as alive)."""
    return backend_of(cell).request_row(reply, cell["prompt_tokens"], cell["n_predict"],
                                        True, cell["crash_below_tps"])


def _drive(cell: CellSlice, link: Any, server: Launch, count: int | None = None,
           meter: interference.Meter | None = None
           ) -> tuple[list[Shot], precision.Stopped]:
    """Send the cell's requests (`count` single-stream releases, or as
    `stopping.more_shots` says: its targets known while `meter` reads the machines
    quiet), counting the RPC bytes each release causes, and say why they stopped. After
    a release with a failed request the rest are not sent: the failure is the result."""
    out: list[Shot] = []
    reached = False

    def known_and_quiet() -> bool:
        nonlocal reached
        reached = known(cell, out) and quiet(cell, link, meter)
        return reached

    with link.host_a.entered():
        backend = backend_of(cell)
        pool = backend.prompt_pool(server.url)
        started = time.monotonic()
        while (len(out) < count if count is not None
               else stopping.more_shots(cell, len(out), time.monotonic() - started,
                                        known_and_quiet)):
            batch = [backend.prompt(pool, cell["prompt_tokens"], secrets.randbits(63))
                     for _ in range(cell["concurrency"])]
            rpc = backend.traffic(link, server)
            _LOG.log(f"{_what(cell, link)}: release {len(out) + 1}, sending")
            replies = backend.stream(server.url, batch, cell["n_predict"],
                                     cell["request_timeout_s"], rpc.at_first_token)
            rpc.finish()
            out.append((replies, rpc))
            _progress(cell, link, len(out), replies, time.monotonic() - started)
            if any(r.error_type or r.http_status != 200 for r in replies):
                return out, precision.FAILURE
    return out, precision.TARGET if reached else precision.CEILING


def quiet(cell: CellSlice, link: Any, meter: interference.Meter | None) -> bool:
    """Whether the machines were quiet so far by the cell's interference limits (its
    slice's `interference`, or their defaults): the rule stops a cell early only then.
    Another program's bursts come and go: a few requests that missed them understate the
    spread that the next ones would show, so a flagged cell runs to its ceiling."""
    if meter is None:
        return True
    reason = meter.others_at_work(cell.get("interference"))
    if reason:
        _LOG.log(f"{_what(cell, link)}: figures known, but not stopping early: {reason}")
    return reason is None


_LOG = Console(width=140, log_path=False, highlight=False)  # the job log: stdout


def _what(cell: CellSlice, link: Any) -> str:
    """The progress line's label (the slice has the model's settings, not its name)."""
    return f"{link.pair}/{link.name} {cell['prompt_tokens']} tokens x{cell['concurrency']}"


def _progress(cell: CellSlice, link: Any, release: int, replies: list[client.Reply],
              elapsed_s: float) -> None:
    """Two lines per release in the job's log, written between releases, never during
    one: when it is sent (a long prefill is silent for minutes), and when it ends: requests
    ok, tokens, decode rate, time."""
    ok = [r for r in replies if not r.error_type and r.http_status == 200]
    tokens = sum(len(r.tokens) for r in replies)
    rates = [(len(r.tokens) - 1) / ((r.tokens[-1]["t_ns"] - r.tokens[0]["t_ns"]) / 1e9)
             for r in ok if len(r.tokens) > 1 and r.tokens[-1]["t_ns"] > r.tokens[0]["t_ns"]]
    rate = f"{sum(rates) / len(rates):,.0f} tok/s decode" if rates else "no decode rate"
    _LOG.log(f"{_what(cell, link)}: release {release}, {len(ok)}/{len(replies)} ok, "
             f"{tokens} tokens, {rate}, {elapsed_s:.1f} s")


def _hottest(sensors: telemetry.SamplerFigures, when: str) -> float | None:
    values = [sensors.get(f"temp_{side}_{when}_c") for side in ("a", "b")]
    values = [v for v in values if v is not None]
    return max(values) if values else None
