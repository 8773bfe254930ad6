"""Figures derived from token timestamps, cross-checked against the server's timings.

Definitions (docs: README, "What the numbers mean"):
- ttft_ms: first token's arrival minus the request's send time (client clock).
- prefill_tps: prompt tokens / ttft (client); server_prefill_tps: the server's own.
- decode_ms_per_token: (last token - first token) / (tokens - 1), from arrival times.
- server_ttft_ms: the server's own time to first token (llama.cpp: its prompt_ms plus
  the first token's predicted_ms; vLLM: its per-request metrics).
- throughput_tps (per cell): all generated tokens / the cell's wall time.
- overlap (per concurrency cell, the seed's "true concurrency ratio"):
      overlap = (N * T1 - W) / ((N - 1) * T1)
  W: wall time of the N-way cell (first send to last token); T1: median wall time of a
  single request in the 1-way cell of the same pair, link, model and context. 1.0: the N
  requests took as long as one (fully concurrent); 0: as long as N in a row (serial);
  below 0: longer than serial.
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np

from splitbench.backends.client import Reply

# A prompt longer than the server's context: llama-server's error type; the vLLM
# backend names its own 400s this way once it has read their message.
CONTEXT_WALL_ERRORS = ("exceed_context_size_error",)

# Every status a request can get; a cell's status is its worst request's, in this order.
# "load": the servers never came up with the model (the launch failed).
SEVERITY = ("load", "crash", "overflow", "ctx_wall", "timeout", "error", "ok")


class ServerColumns(TypedDict):
    """SERVER_COLUMNS: the server's own figures of a request, None where it does not say."""

    server_prompt_ms: float | None
    server_ttft_ms: float | None
    server_predicted_ms: float | None
    server_prefill_tps: float | None
    server_decode_ms_per_token: float | None
    server_predicted_n: int | None
    cache_n: int | None
    truncated: bool | None


class ServerFigures(ServerColumns, total=False):
    """The server's own figures of one request, as its backend reads them from the reply
    (`request_row`'s `server`): SERVER_COLUMNS and the prompt tokens it counted."""

    prompt_tokens: int | None


class RequestRow(ServerColumns):
    """One request's row (`request_row`, docs/columns.md): its status, what the client
    measured from its token arrivals (ns times on the wall clock), the server's own."""

    request_id: int
    status: str
    http_status: int | None
    error_type: str | None
    error_text: str | None
    target_prompt_tokens: int
    prompt_tokens: int | None
    generated_tokens: int
    n_predict: int
    t_send_ns: int
    t_first_ns: int | None
    t_last_ns: int | None
    t_end_ns: int
    ttft_ms: float | None
    prefill_tps: float | None
    decode_ms_per_token: float | None
    decode_tps: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    coalesced_tokens: int
    arrival_clock: str | None
    decode_ms_se: float | None
    decode_vs_server: float | None
    first_token_late_ms: float | None
    last_token_late_ms: float | None


def classify(reply: Reply, n_predict: int, server_alive: bool, crash_below_tps: float,
             decode_tps: float | None) -> str:
    if reply.error_type == "launch_failed":
        return "load"
    if reply.http_status == 400 and reply.error_type in CONTEXT_WALL_ERRORS:
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
                crash_below_tps: float, server: ServerFigures) -> RequestRow:
    """A request's row: what the client measured from its token arrivals, and the
    server's own figures (`server`: the backend's server_* columns, prompt_tokens,
    cache_n, truncated) to cross-check them."""
    times = [t["t_ns"] for t in reply.tokens]
    n = len(times)
    ttft_ms = (times[0] - reply.t_send_ns) / 1e6 if n else None
    decode_ms = (times[-1] - times[0]) / (n - 1) / 1e6 if n > 1 else None
    decode_tps = 1000 / decode_ms if decode_ms else None
    prompt_n = server.get("prompt_tokens")
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
        # The second witness: the client's decode against the server's own, and where
        # they part (a first or last token that reached the client late).
        "decode_vs_server": _relative(decode_ms, server.get("server_decode_ms_per_token")),
        **_end_tokens_late_ms(reply.tokens),
        **{column: server.get(column) for column in SERVER_COLUMNS},
    }


# How far the client's decode may lie from the server's own before a request is marked
# (summary.cell_summary flags its cell): the two agree within 0.1% when nothing stands
# between the server's stamp of a token and its arrival.
WITNESS_BOUND = 0.05


def _relative(measured: float | None, reference: float | None) -> float | None:
    """measured / reference - 1; None where either is missing or the reference is 0."""
    return measured / reference - 1 if measured and reference else None


class EndTokensLate(TypedDict):
    """How much later than the request's median token its first and last token reached
    the client, against the server's own stamps of them (`_end_tokens_late_ms`)."""

    first_token_late_ms: float | None
    last_token_late_ms: float | None


def _end_tokens_late_ms(tokens: list[dict]) -> EndTokensLate:
    """The decode window runs from the first token's arrival to the last one's, so a
    late first token shortens it and a late last one stretches it. Each token's arrival
    less the server's stamp of it (its cumulative predicted_ms, from the first token)
    is the same for every token but for how late it left the server or crossed to the
    client; the median is the request's usual, and the two ends are read against it.
    None where the server stamps no tokens (vLLM) or fewer than three came."""
    stamps = [t.get("server_cum_predicted_ms") for t in tokens]
    if len(tokens) < 3 or any(s is None for s in stamps):
        return {"first_token_late_ms": None, "last_token_late_ms": None}
    arrival_ms = (np.array([t["t_ns"] for t in tokens], dtype="int64") - tokens[0]["t_ns"]) / 1e6
    offset = arrival_ms - (np.array(stamps, dtype="float64") - stamps[0])
    usual = float(np.median(offset))
    return {"first_token_late_ms": round(float(offset[0]) - usual, 3),
            "last_token_late_ms": round(float(offset[-1]) - usual, 3)}


# The server's own figures every backend reports in a request's row (None where its
# server does not say): prompt time, its time to first token, generation time, prompt
# rate, decode ms/token, tokens generated, prompt tokens served from a cache.
SERVER_COLUMNS = ("server_prompt_ms", "server_ttft_ms", "server_predicted_ms",
                  "server_prefill_tps", "server_decode_ms_per_token", "server_predicted_n",
                  "cache_n", "truncated")


def throughput_tps(rows: list[RequestRow]) -> float | None:
    """A cell's aggregate throughput: every generated token over the cell's wall time."""
    wall = wall_ms(rows)
    tokens = sum(r["generated_tokens"] for r in rows)
    return tokens / (wall / 1000) if wall and tokens else None


def cell_status(statuses: list[str]) -> str:
    return min(statuses, key=SEVERITY.index) if statuses else "error"


def wall_ms(rows: list[RequestRow]) -> float | None:
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


class ReleaseFigures(TypedDict):
    """One release's own wall time and throughput, on each of its rows."""

    release_wall_ms: float | None
    release_throughput_tps: float | None


def release_figures(rows: list[dict[str, Any]]
                    ) -> dict[tuple[bool, int, int], ReleaseFigures]:
    """Each release's own wall time (its first send to its last token) and throughput
    (its tokens over that wall time), by (reference, round, shot): a concurrent cell's
    overlap and throughput are taken per release (summary.cell_summary), the cell-wide
    `cell_wall_ms` spans every release."""
    groups: dict[tuple[bool, int, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["reference"], row["round"], row["shot"]), []).append(row)
    return {key: {"release_wall_ms": wall_ms(group),
                  "release_throughput_tps": throughput_tps(group)}
            for key, group in groups.items()}
