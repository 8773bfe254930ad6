"""The onetrip front end's own HTTP API (server.py), over splitbench's shared streaming
client: `POST /generate` with the prompt's token ids streams one event per token,
`{"id": <token>, "n": <tokens so far>, "decode_ms": <since the first>}`, then
`{"done": true, "prompt_n": ..., "prompt_ms": ..., "decode_ms": ..., "n": ...}`;
`GET /vocabulary` lists the token ids prompts are drawn from."""

from __future__ import annotations

import functools
from typing import Any

from splitbench.backends import client, metrics, server_http
from splitbench.backends.client import Reply, StreamApi, add_tokens, took_error
from splitbench.backends.metrics import RequestRow, ServerFigures
from splitbench.backends.prompts import checked_pool


def body(ids: list[int], n_predict: int) -> dict[str, Any]:
    return {"prompt": ids, "tokens": n_predict}


def take_event(event: dict[str, Any], t_ns: int, t_mono: int, reply: Reply) -> None:
    if took_error(event, reply):
        return
    if event.get("done"):
        reply.final = event
        return
    add_tokens(reply, event["n"] - len(reply.tokens), [event["id"]], t_ns, t_mono)


API = StreamApi(path="/generate", body=body, take_event=take_event)

# (url, prompts, n_predict, timeout, on_first_token=None) -> one Reply per prompt.
run_concurrent = functools.partial(client.run_concurrent, API)


def request_row(reply: Reply, target_prompt: int, n_predict: int, server_alive: bool,
                crash_below_tps: float) -> RequestRow:
    final = reply.final or {}
    n, decode_ms = final.get("n"), final.get("decode_ms")
    server: ServerFigures = {
        "prompt_tokens": final.get("prompt_n"),
        "server_prompt_ms": final.get("prompt_ms"),
        "server_ttft_ms": None, "server_predicted_ms": decode_ms,
        "server_prefill_tps": None, "server_predicted_n": n,
        "server_decode_ms_per_token": decode_ms / (n - 1) if decode_ms and n and n > 1
        else None,
        "cache_n": None, "truncated": None,
    }
    return metrics.request_row(reply, target_prompt, n_predict, server_alive,
                               crash_below_tps, server)


def token_pool(url: str) -> list[int]:
    reply = server_http.get(f"{url}/vocabulary", timeout=30)
    reply.raise_for_status()
    return checked_pool(reply.json()["ids"], url)
