"""A request's row from vLLM's reply: the client's figures (backends.metrics) and the
server's per-request metrics (its last event) to cross-check them."""

from __future__ import annotations

from splitbench.backends import metrics
from splitbench.backends.client import Reply
from splitbench.backends.metrics import RequestRow, ServerFigures

# vLLM's 400s for a prompt the model's length does not hold (longer than it, or so long
# that no token is left to generate).
CONTEXT_WALL = ("maximum context length", "max_tokens must be at least 1")
# vLLM's error event when its engine (a rank, or the connection between them) died.
ENGINE_DIED = "EngineCore encountered an issue"


def request_row(reply: Reply, target_prompt: int, n_predict: int, server_alive: bool,
                crash_below_tps: float) -> RequestRow:
    if reply.http_status == 400 and any(t in (reply.error_text or "") for t in CONTEXT_WALL):
        reply.error_type = metrics.CONTEXT_WALL_ERRORS[0]
    if ENGINE_DIED in (reply.error_text or ""):
        # The engine says it died (a rank's host gone): a crash, also in the second
        # before rank 0's API server notices and exits.
        server_alive = False
    usage = reply.final.get("usage") or {}
    figures = reply.final.get("metrics") or {}
    generated = usage.get("completion_tokens")
    ttft = figures.get("time_to_first_token_ms")
    generation = figures.get("generation_time_ms")
    server: ServerFigures = {
        "prompt_tokens": usage.get("prompt_tokens"),
        # vLLM's time to first token is its prompt processing and first sample together.
        "server_prompt_ms": ttft,
        "server_ttft_ms": ttft,
        "server_predicted_ms": generation,
        "server_prefill_tps": usage["prompt_tokens"] / (ttft / 1000)
        if ttft and usage.get("prompt_tokens") else None,
        "server_decode_ms_per_token": figures.get("mean_itl_ms"),
        "server_predicted_n": generated,
        # Prefix caching is off (--no-enable-prefix-caching); the usage says when it was not.
        "cache_n": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        if usage else None,
        "truncated": reply.final.get("finish_reason") not in (None, "length"),
    }
    return metrics.request_row(reply, target_prompt, n_predict, server_alive,
                               crash_below_tps, server)
