"""llama-server's HTTP API as splitbench speaks it: the streaming request and its events
(`POST /completion` with the prompt as token ids, one event per sampled token with the
server's cumulative timings, a last event with `"stop": true`) for the shared client
(splitbench.backends.client); a request's row from the reply, with the server's own
`timings` to cross-check the client's figures (splitbench.backends.metrics); and the token
pool prompts are drawn from, from llama-server's own tokenizer
(splitbench.backends.prompts)."""

from __future__ import annotations

import functools
from typing import Any, TypedDict

from splitbench.backends import client, metrics, server_http
from splitbench.backends.client import Reply, StreamApi, add_tokens, took_error
from splitbench.backends.metrics import RequestRow, ServerFigures
from splitbench.backends.prompts import FILLER_TEXT, checked_pool


class LlamaServerCompletion(TypedDict):
    """The body of a `POST /completion` request (`body`)."""

    prompt: list[int]
    n_predict: int
    ignore_eos: bool
    temperature: float
    cache_prompt: bool
    stream: bool
    timings_per_token: bool


def body(ids: list[int], n_predict: int) -> LlamaServerCompletion:
    """Exactly these tokens (no BOS added), exactly n_predict generated, no prompt cache,
    the server's timings in every event."""
    return {"prompt": ids, "n_predict": n_predict, "ignore_eos": True, "temperature": 0,
            "cache_prompt": False, "stream": True, "timings_per_token": True}


def take_event(event: dict[str, Any], t_ns: int, t_mono: int, reply: Reply) -> None:
    if took_error(event, reply):
        return
    if event.get("stop"):
        reply.final = event
        return
    # tokens_predicted is cumulative: a chunk that completes held-back bytes (partial
    # UTF-8) can carry several tokens, and one may carry none.
    total = event.get("tokens_predicted")
    ids = event.get("tokens") or []
    new = total - len(reply.tokens) if total is not None else len(ids)
    timings = event.get("timings") or {}
    add_tokens(reply, new, ids, t_ns, t_mono,
               server_cum_prompt_ms=timings.get("prompt_ms"),
               server_cum_predicted_ms=timings.get("predicted_ms"),
               server_cum_predicted_n=timings.get("predicted_n"))


# Each request of a release on its own slot, 0..N-1 (`id_slot`): llama-server keeps each
# slot's KV cache as its own stream and a decode step batches only adjacent ones. Left to
# its least-recently-used choice, a 2-way release after a long cell landed on slots 0 and
# 3 every other time and was decoded one step per slot (a round trip per token, not per
# step), so the cell's decode alternated between two levels with what ran before it.
API = StreamApi(path="/completion", body=body, take_event=take_event, slot_key="id_slot")

# (url, prompts, n_predict, timeout, on_first_token=None) -> one Reply per prompt.
run_concurrent = functools.partial(client.run_concurrent, API)


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


def token_pool(url: str) -> list[int]:
    """Token ids the served model produces for ordinary text (valid for any vocabulary)."""
    reply = server_http.post(f"{url}/tokenize", {"content": FILLER_TEXT * 4}, timeout=30)
    reply.raise_for_status()
    return checked_pool(reply.json()["tokens"], url)
