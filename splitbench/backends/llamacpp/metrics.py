"""A request's row from llama-server's reply: the client's figures (backends.metrics)
and the server's own `timings` (its last event) to cross-check them."""

from __future__ import annotations

from splitbench.backends import metrics
from splitbench.backends.client import Reply
from splitbench.backends.metrics import RequestRow, ServerFigures


def request_row(reply: Reply, target_prompt: int, n_predict: int, server_alive: bool,
                crash_below_tps: float) -> RequestRow:
    timings = reply.final.get("timings") or {}
    predicted_n = timings.get("predicted_n")
    predicted_ms = timings.get("predicted_ms")
    server: ServerFigures = {
        "prompt_tokens": timings.get("prompt_n"),
        "server_prompt_ms": timings.get("prompt_ms"),
        # The server's own time to first token: its prompt processing plus the first
        # sampled token, from the first streamed event's cumulative timings.
        "server_ttft_ms": _server_ttft_ms(reply),
        "server_predicted_ms": predicted_ms,
        "server_prefill_tps": timings.get("prompt_per_second"),
        # predicted_ms runs from the first to the last generated token.
        "server_decode_ms_per_token": predicted_ms / (predicted_n - 1)
        if predicted_ms and predicted_n and predicted_n > 1 else None,
        "server_predicted_n": predicted_n,
        "cache_n": timings.get("cache_n"),
        "truncated": reply.final.get("truncated"),
    }
    return metrics.request_row(reply, target_prompt, n_predict, server_alive,
                               crash_below_tps, server)


def _server_ttft_ms(reply: Reply) -> float | None:
    first = reply.tokens[0] if reply.tokens else {}
    if first.get("server_cum_prompt_ms") is None:
        return None
    return first["server_cum_prompt_ms"] + (first.get("server_cum_predicted_ms") or 0.0)
