"""One cell: N concurrent requests of one context length against one launch."""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from splitbench import client, metrics, netsetup, parquet_io, prompts, servers, telemetry
from splitbench.lab import RPC_PORT

TOKEN_COLUMNS = ["request_id", "token_index", "token_id", "t_ns", "t_mono_ns", "chunk_tokens",
                 "server_cum_prompt_ms", "server_cum_predicted_ms", "server_cum_predicted_n"]


class TrafficSnapshots:
    """RPC connection counters at the cell's start, soon after its first token, and at
    its end, each with the monotonic time it was read.

    Start to first-token snapshot is prefill; between the later snapshots is decode, and
    bytes per token divide by the tokens that arrived between those two reads. Exact at
    concurrency 1; at higher concurrency the other requests' prefill falls partly into
    "decode".
    """

    def __init__(self, link: Any) -> None:
        self.link = link
        self.first = threading.Event()
        self.at: dict[str, tuple[int, dict | None]] = {"start": self.read()}
        self._watcher = threading.Thread(target=self._at_first, daemon=True)
        self._watcher.start()

    def read(self) -> tuple[int, dict | None]:
        before = time.monotonic_ns()
        counters = telemetry.rpc_counters(self.link.host_a, self.link.connect_addr, RPC_PORT)
        return (before + time.monotonic_ns()) // 2, counters

    def _at_first(self) -> None:
        self.first.wait()
        self.at["first"] = self.read()

    def finish(self) -> None:
        self.first.set()
        self._watcher.join(timeout=30)
        self.at["end"] = self.read()

    def figures(self, replies: list[client.Reply]) -> dict[str, Any]:
        (_, start), (t_first, first), (t_end, end) = (
            self.at["start"], self.at.get("first", (0, None)), self.at["end"])
        prefill = telemetry.traffic(start, first)
        decode = telemetry.traffic(first, end)
        decoded = sum(t_first <= t["t_mono_ns"] <= t_end for r in replies for t in r.tokens)
        out = {f"rpc_prefill_{k}": v for k, v in prefill.items()}
        out.update({f"rpc_decode_{k}": v for k, v in decode.items()})
        out["rpc_decode_tokens"] = decoded
        for way in ("a_to_b", "b_to_a"):
            total = decode[f"{way}_bytes"]
            out[f"rpc_bytes_per_token_{way}"] = total / decoded if total and decoded else None
        return out


@contextlib.contextmanager
def rpc_traffic(link: Any) -> Iterator[TrafficSnapshots]:
    snapshots = TrafficSnapshots(link)
    try:
        yield snapshots
    finally:
        snapshots.finish()


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
    """Measure one cell and write its token and request Parquet files."""
    toolchain = json.loads(Path(toolchain_path).read_text())
    link_row = pd.read_parquet(link_result).iloc[0]
    link = netsetup.ensure(link_spec)
    before = telemetry.snapshot()
    n_predict, conc = cell["n_predict"], cell["concurrency"]
    try:
        server = servers.ensure(link, launch["settings"], model["path"], model["sha256"],
                                toolchain)
    except servers.LaunchError as exc:
        replies = [client.Reply(request_id=i, error_type="launch_failed",
                                error_text=str(exc)[-2000:]) for i in range(conc)]
        server, alive, snapshots = None, False, None
    else:
        with link.host_a.entered():
            pool = prompts.token_pool(server.url)
            batch = [prompts.prompt(pool, cell["prompt_tokens"], secrets.randbits(63))
                     for _ in range(conc)]
            with rpc_traffic(link) as snapshots:
                replies = client.run_concurrent(server.url, batch, n_predict,
                                                cell["request_timeout_s"], snapshots.first)
            alive = server.alive() and servers.healthy(server.url)
    after = telemetry.snapshot()
    rows = [
        metrics.request_row(r, cell["prompt_tokens"], n_predict,
                            alive, cell["crash_below_tps"])
        for r in replies
    ]
    cell_fields = {
        "cell_status": metrics.cell_status([r["status"] for r in rows]),
        "cell_wall_ms": metrics.wall_ms(rows),
        "launch_id": server.launch_id if server else None,
        "link_fingerprint": link_row["fingerprint"],
        "temp_before_c": before["temp_max_c"],
        "temp_after_c": after["temp_max_c"],
        "load1_before": before["load1"],
        **(snapshots.figures(replies) if snapshots else {}),
    }
    requests = pd.DataFrame([{**r, **cell_fields} for r in rows])
    tokens = pd.DataFrame(
        [{**t, "request_id": r.request_id} for r in replies for t in r.tokens],
        columns=TOKEN_COLUMNS,
    ).astype({"t_ns": "int64", "t_mono_ns": "int64"})
    tokens = tokens.merge(requests.drop(columns=["error_text"]), on="request_id", how="left")
    provenance = {
        "config": {"cell": cell, "link": link_spec, "model": model},
        "launch": server.record if server else None,
        "toolchain": toolchain,
        "link_fingerprint": link_row["fingerprint"],
        "telemetry": {"before": before, "after": after},
    }
    parquet_io.write(requests, requests_out, provenance)
    parquet_io.write(tokens, tokens_out, provenance)
    return requests
