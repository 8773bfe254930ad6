"""llama-server's streaming endpoint as the client (splitbench.backends.client) sees it:
`POST /completion` with the prompt as token ids, one event per sampled token with the
server's cumulative timings, and a last event with `"stop": true`."""

from __future__ import annotations

import functools
from typing import Any, TypedDict

from splitbench.backends import client
from splitbench.backends.client import Reply, StreamApi, add_tokens, took_error


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


API = StreamApi(path="/completion", body=body, take_event=take_event)

# (url, prompts, n_predict, timeout, on_first_token=None) -> one Reply per prompt.
run_concurrent = functools.partial(client.run_concurrent, API)
