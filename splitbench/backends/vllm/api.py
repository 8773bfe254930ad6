"""vLLM's OpenAI-compatible HTTP API as splitbench speaks it: the streaming request and its
events (`POST /v1/completions` with the prompt as token ids; each event's
`choices[0].token_ids` are the tokens it carries: under load one event can carry several,
or none; the last event has no choices, the usage and, with
`--enable-per-request-metrics`, the server's own metrics of the request) for the shared
client (splitbench.backends.client); a request's row from the reply, cross-checked with
those metrics (splitbench.backends.metrics); and the token pool prompts are drawn from,
from the server's own tokenizer (splitbench.backends.prompts)."""

from __future__ import annotations

import functools
from typing import Any, TypedDict

from splitbench.backends import client, metrics, server_http
from splitbench.backends.client import Reply, StreamApi, add_tokens, took_error
from splitbench.backends.metrics import RequestRow, ServerFigures
from splitbench.backends.prompts import FILLER_TEXT, checked_pool

SERVED_NAME = "splitbench"  # --served-model-name: what requests name


class OpenAICompletion(TypedDict):
    """The body of a `POST /v1/completions` request (`body`)."""

    model: str
    prompt: list[int]
    max_tokens: int
    temperature: float
    ignore_eos: bool
    stream: bool
    return_token_ids: bool
    stream_options: dict[str, bool]


def body(ids: list[int], n_predict: int) -> OpenAICompletion:
    """Exactly these tokens, exactly n_predict generated (greedy, EOS ignored), each
    event's token ids, and the usage and metrics at the end."""
    return {"model": SERVED_NAME, "prompt": ids, "max_tokens": n_predict, "temperature": 0,
            "ignore_eos": True, "stream": True, "return_token_ids": True,
            "stream_options": {"include_usage": True}}


def take_event(event: dict[str, Any], t_ns: int, t_mono: int, reply: Reply) -> None:
    if took_error(event, reply):
        return
    choices = event.get("choices") or []
    if not choices:
        if "usage" in event:
            reply.final = {**reply.final, **event}  # the finish reason came before it
        return
    ids = choices[0].get("token_ids") or []
    add_tokens(reply, len(ids), ids, t_ns, t_mono)
    if choices[0].get("finish_reason"):
        reply.final.setdefault("finish_reason", choices[0]["finish_reason"])


API = StreamApi(path="/v1/completions", body=body, take_event=take_event)

# (url, prompts, n_predict, timeout, on_first_token=None) -> one Reply per prompt.
run_concurrent = functools.partial(client.run_concurrent, API)


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


def token_pool(url: str) -> list[int]:
    """Token ids the served model produces for ordinary text (valid for any vocabulary)."""
    reply = server_http.post(f"{url}/tokenize", {"model": SERVED_NAME,
                                                 "prompt": FILLER_TEXT * 4,
                                                 "add_special_tokens": False}, timeout=30)
    reply.raise_for_status()
    return checked_pool(reply.json()["tokens"], url)
