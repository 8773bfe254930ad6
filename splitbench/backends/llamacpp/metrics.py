"""Figures derived from token timestamps, cross-checked against the server's timings.

Definitions (docs: README, "What the numbers mean"):
- ttft_ms: first token's arrival minus the request's send time (client clock).
- prefill_tps: prompt tokens / ttft (client); server_prefill_tps: the server's own.
- decode_ms_per_token: (last token - first token) / (tokens - 1), from arrival times.
- server_ttft_ms: the server's prompt_ms plus its first token's predicted_ms.
- throughput_tps (per cell): all generated tokens / the cell's wall time.
- overlap (per concurrency cell, the seed's "true concurrency ratio"):
      overlap = (N * T1 - W) / ((N - 1) * T1)
  W: wall time of the N-way cell (first send to last token); T1: median wall time of a
  single request in the 1-way cell of the same pair, link, model and context. 1.0: the N
  requests took as long as one (fully concurrent); 0: as long as N in a row (serial);
  below 0: longer than serial.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from splitbench.backends.llamacpp.client import Reply

# Every status a request can get; a cell's status is its worst request's, in this order.
# "load": the servers never came up with the model (the launch failed).
SEVERITY = ("load", "crash", "overflow", "ctx_wall", "timeout", "error", "ok")


def classify(reply: Reply, n_predict: int, server_alive: bool, crash_below_tps: float,
             decode_tps: float | None) -> str:
    if reply.error_type == "launch_failed":
        return "load"
    if reply.http_status == 400 and reply.error_type == "exceed_context_size_error":
        return "ctx_wall"
    if reply.http_status is not None and reply.http_status >= 500:
        return "overflow"
    if reply.error_type == "timeout":
        return "timeout"
    if not server_alive:
        return "crash"
    if reply.error_type is not None or reply.http_status != 200:
        return "error"
    if reply.final.get("truncated") or len(reply.tokens) < n_predict:
        return "overflow"
    if decode_tps is not None and decode_tps < crash_below_tps:
        return "crash"
    return "ok"


def request_row(reply: Reply, target_prompt: int, n_predict: int, server_alive: bool,
                crash_below_tps: float) -> dict[str, Any]:
    timings = reply.final.get("timings") or {}
    times = [t["t_ns"] for t in reply.tokens]
    n = len(times)
    ttft_ms = (times[0] - reply.t_send_ns) / 1e6 if n else None
    decode_ms = (times[-1] - times[0]) / (n - 1) / 1e6 if n > 1 else None
    decode_tps = 1000 / decode_ms if decode_ms else None
    prompt_n = timings.get("prompt_n")
    prompt_ms = timings.get("prompt_ms")
    predicted_n = timings.get("predicted_n")
    predicted_ms = timings.get("predicted_ms")
    server_decode_ms = (
        predicted_ms / (predicted_n - 1) if predicted_ms and predicted_n and predicted_n > 1
        else None
    )
    gaps_ns = np.diff(times)  # inter-token gaps
    itl = gaps_ns / 1e6 if n > 2 else np.array([])
    status = classify(reply, n_predict, server_alive, crash_below_tps, decode_tps)
    return {
        "request_id": reply.request_id,
        "status": status,
        "http_status": reply.http_status,
        "error_type": reply.error_type,
        "error_text": reply.error_text,
        "target_prompt_tokens": target_prompt,
        "prompt_tokens": prompt_n,
        "generated_tokens": n,
        "n_predict": n_predict,
        "t_send_ns": reply.t_send_ns,
        "t_first_ns": times[0] if n else None,
        "t_last_ns": times[-1] if n else None,
        "t_end_ns": reply.t_end_ns,
        "ttft_ms": ttft_ms,
        "prefill_tps": (prompt_n or target_prompt) / (ttft_ms / 1000) if ttft_ms else None,
        "decode_ms_per_token": decode_ms,
        "decode_tps": decode_tps,
        "itl_p50_ms": float(np.percentile(itl, 50)) if itl.size else None,
        "itl_p99_ms": float(np.percentile(itl, 99)) if itl.size else None,
        # Tokens read in the same recv as the one before them share its timestamp (the
        # arrival of the read's last segment): the client could not tell them apart.
        "coalesced_tokens": int(np.sum(gaps_ns == 0)),
        "arrival_clock": reply.arrival_clock,
        # Standard error of decode_ms_per_token (the mean inter-token gap): the per-token
        # dispersion that tables use as uncertainty when there are no repeats.
        "decode_ms_se": float(np.std(gaps_ns, ddof=1) / 1e6 / np.sqrt(n - 1))
        if n > 2 else None,
        "server_prompt_ms": prompt_ms,
        # The server's own time to first token: its prompt processing plus the first
        # sampled token, from the first streamed event's cumulative timings.
        "server_ttft_ms": _server_ttft_ms(reply),
        "server_predicted_ms": predicted_ms,
        "server_prefill_tps": timings.get("prompt_per_second"),
        "server_decode_ms_per_token": server_decode_ms,
        "server_predicted_n": predicted_n,
        "cache_n": timings.get("cache_n"),
        "truncated": reply.final.get("truncated"),
    }


def _server_ttft_ms(reply: Reply) -> float | None:
    first = reply.tokens[0] if reply.tokens else {}
    if first.get("server_cum_prompt_ms") is None:
        return None
    return first["server_cum_prompt_ms"] + (first.get("server_cum_predicted_ms") or 0.0)


def throughput_tps(rows: list[dict[str, Any]]) -> float | None:
    """A cell's aggregate throughput: every generated token over the cell's wall time."""
    wall = wall_ms(rows)
    tokens = sum(r["generated_tokens"] for r in rows)
    return tokens / (wall / 1000) if wall and tokens else None


def cell_status(statuses: list[str]) -> str:
    return min(statuses, key=SEVERITY.index) if statuses else "error"


def wall_ms(rows: list[dict[str, Any]]) -> float | None:
    """First send to last token (or last reply) across a cell's requests."""
    if not rows:
        return None
    ends = [r["t_last_ns"] or r["t_end_ns"] for r in rows]
    wall = max(ends) - min(r["t_send_ns"] for r in rows)
    # Zero when no request was ever sent (a failed launch): no wall time, not 0 ms.
    return wall / 1e6 if wall > 0 else None


def overlap(n: int, single_ms: float | None, cell_wall_ms: float | None) -> float | None:
    if n < 2 or not single_ms or cell_wall_ms is None:
        return None
    return (n * single_ms - cell_wall_ms) / ((n - 1) * single_ms)
