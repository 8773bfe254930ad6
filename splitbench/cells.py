"""One cell: N concurrent requests of one context length against one launch."""

from __future__ import annotations

import json
import os
import secrets
import time
import traceback
from pathlib import Path
from typing import Any

import httpx
import pandas as pd

from splitbench import (
    archive,
    client,
    interference,
    lab,
    metrics,
    netsetup,
    parquet_io,
    procs,
    prompts,
    servers,
    telemetry,
    wakeup,
)
from splitbench.hosts import HostError
from splitbench.lab import RPC_PORT

TOKEN_COLUMNS = ["request_id", "token_index", "token_id", "t_ns", "t_mono_ns", "chunk_tokens",
                 "server_cum_prompt_ms", "server_cum_predicted_ms", "server_cum_predicted_n"]


def run(
    cell: dict[str, Any],
    link_spec: dict[str, Any],
    model: dict[str, Any],
    launch: dict[str, Any],
    toolchain_path: str,
    link_result: str,
    tokens_out: str,
    requests_out: str,
) -> pd.DataFrame:
    """Measure one cell (`repeats` times, back to back) and write its token and request
    Parquet files; a previous measurement of the cell goes to the archive first."""
    toolchain = json.loads(Path(toolchain_path).read_text())
    fingerprint = pd.read_parquet(link_result).iloc[0]["fingerprint"]
    link = netsetup.ensure(link_spec)
    measured = []
    # One job at a time drives a pair: another would relaunch its servers mid-cell.
    hosts = {"a": link.host_a, "b": link.host_b}
    with procs.locked(f"pair-{link.pair}"), wakeup.during(cell, hosts) as held:
        for repeat in range(cell.get("repeats", 1)):
            measured.append(_measure(cell, link, model, launch["settings"], toolchain,
                                     fingerprint, repeat, held))
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
    archive.supersede([tokens_out, requests_out])
    parquet_io.write(requests, requests_out, provenance)
    parquet_io.write(tokens, tokens_out, provenance)
    archive.keep([tokens_out, requests_out])
    return requests


def _measure(cell: dict[str, Any], link: Any, model: dict[str, Any],
             settings: dict[str, Any], toolchain: dict[str, Any], fingerprint: str,
             repeat: int, held: dict[str, str]) -> tuple[pd.DataFrame, pd.DataFrame,
                                                        dict[str, Any]]:
    """One measurement of the cell: request rows, token rows, provenance."""
    sampler = telemetry.Sampler({"a": link.host_a, "b": link.host_b})
    try:
        shots, server, alive, harness_error, cpu = _attempt(cell, link, model, settings,
                                                            toolchain, sampler)
    finally:
        sensors = sampler.finish()
    n_predict = cell["n_predict"]
    rows, replies = [], []
    for shot, (shot_replies, rpc) in enumerate(shots):
        traffic = rpc.figures([t["t_mono_ns"] for r in shot_replies for t in r.tokens]
                              ) if rpc else {}
        for reply in shot_replies:
            # Request ids run on across a single-stream cell's sequential requests.
            reply.request_id = len(replies)
            replies.append(reply)
            row = metrics.request_row(reply, cell["prompt_tokens"], n_predict, alive,
                                      cell["crash_below_tps"])
            rows.append({**row, "shot": shot, **traffic})
    cell_fields = {
        "repeat": repeat,
        "cell_status": metrics.cell_status([r["status"] for r in rows]),
        "cell_wall_ms": metrics.wall_ms(rows),
        "cell_throughput_tps": metrics.throughput_tps(rows),
        "launch_id": server.launch_id if server else None,
        "link_fingerprint": fingerprint,
        # The hotter host's figures, for tables; each host's are in the columns below.
        "temp_before_c": _hottest(sensors, "before"),
        "temp_after_c": _hottest(sensors, "after"),
        "temp_peak_c": _hottest(sensors, "peak"),
        **sensors,
        **cpu,
        **held,
    }
    requests = pd.DataFrame([{**r, **cell_fields} for r in rows])
    tokens = pd.DataFrame(
        [{**t, "request_id": r.request_id} for r in replies for t in r.tokens],
        columns=TOKEN_COLUMNS,
    ).astype({"t_ns": "int64", "t_mono_ns": "int64"})
    tokens = tokens.merge(requests.drop(columns=["error_text"]), on="request_id", how="left")
    record = {"launch": server.record if server else None, "telemetry": sensors,
              "harness_error": harness_error}
    return requests, tokens, record


Shot = tuple[list[client.Reply], telemetry.RpcTraffic | None]


def _attempt(cell: dict[str, Any], link: Any, model: dict[str, Any],
             settings: dict[str, Any], toolchain: dict[str, Any],
             sampler: telemetry.Sampler) -> tuple[list[Shot], servers.Server | None, bool,
                                                  str | None, dict[str, Any]]:
    """Launch (or reuse) the servers and drive the cell: its shots (replies and RPC
    traffic of each release of requests), the server, whether it survived, the
    harness's own failure (traceback) if there was one, and what else used the CPUs
    meanwhile. A failure is the replies' status, not an exception: the other repeats
    are kept."""
    try:
        server = servers.ensure(link, settings, model["path"], model["sha256"], toolchain)
    except (servers.LaunchError, HostError, httpx.HTTPError) as exc:
        return [(_failed(cell, "launch_failed", str(exc)), None)], None, False, None, {}
    window = interference.Window({"a": link.host_a, "b": link.host_b},
                                 _own_processes(link, server, sampler))
    try:
        shots = _drive(cell, link, server)
    except Exception as exc:  # noqa: BLE001 - becomes this repeat's rows
        text = "".join(traceback.format_exception(exc))[-2000:]
        shots, harness_error = [(_failed(cell, type(exc).__name__, text), None)], text
    else:
        harness_error = None
    cpu = window.finish()
    with link.host_a.entered():
        alive = server.alive() and servers.healthy(server.url)
    return shots, server, alive, harness_error, cpu


def _own_processes(link: Any, server: servers.Server,
                   sampler: telemetry.Sampler) -> dict[str, list[int]]:
    """The measurement's processes on each host: this job (the client), the samplers,
    llama-server and the delay relay on A; the RPC workers on B."""
    own: dict[str, list[int]] = {"a": [os.getpid(), *sampler.local_pids()], "b": []}
    keys = [*server.record["proc_keys"], lab.relay_key(link.pair, link.name)]
    for record in filter(None, map(procs.find, keys)):
        own["b" if record.get("host") == "b" else "a"].append(record["pid"])
    return own


def _failed(cell: dict[str, Any], error_type: str, text: str) -> list[client.Reply]:
    """Every request of the cell, failed before it got a reply, stamped now."""
    now = time.time_ns()
    return [client.Reply(request_id=i, t_send_ns=now, t_end_ns=now, error_type=error_type,
                         error_text=text[-2000:]) for i in range(cell["concurrency"])]


def more_shots(cell: dict[str, Any], sent: int, elapsed_s: float) -> bool:
    """Whether to release the cell's requests once more. A concurrent cell releases its
    N requests once. A single-stream cell sends requests one after another: at least
    `single_stream_requests` (a median and a spread for its prefill, TTFT and decode),
    then more while the cell has run under `single_stream_seconds` (cheap short
    requests buy a tighter spread; an expensive long one is not repeated beyond the
    minimum)."""
    if cell["concurrency"] != 1:
        return sent < 1
    least = cell.get("single_stream_requests", 1)
    return sent < least or elapsed_s < cell.get("single_stream_seconds", 0.0)


def _drive(cell: dict[str, Any], link: Any, server: servers.Server) -> list[Shot]:
    """Send the cell's requests, counting the RPC bytes each release causes. After a
    release with a failed request the rest are not sent: the failure is the result."""
    out: list[Shot] = []
    with link.host_a.entered():
        pool = prompts.token_pool(server.url)
        started = time.monotonic()
        while more_shots(cell, len(out), time.monotonic() - started):
            batch = [prompts.prompt(pool, cell["prompt_tokens"], secrets.randbits(63))
                     for _ in range(cell["concurrency"])]
            rpc = telemetry.RpcTraffic(link.connect_addr,
                                       server.record.get("worker_ports", [RPC_PORT]))
            replies = client.run_concurrent(server.url, batch, cell["n_predict"],
                                            cell["request_timeout_s"], rpc.at_first_token)
            rpc.finish()
            out.append((replies, rpc))
            if any(r.error_type or r.http_status != 200 for r in replies):
                break
    return out


def _hottest(sensors: dict[str, Any], when: str) -> float | None:
    values = [sensors.get(f"temp_{side}_{when}_c") for side in ("a", "b")]
    values = [v for v in values if v is not None]
    return max(values) if values else None
