"""vLLM's OpenAI-compatible streaming endpoint as the client (splitbench.backends.client)
sees it: `POST /v1/completions` with the prompt as token ids; each event's
`choices[0].token_ids` are the tokens it carries (under load one event can carry
several, or none); the last event has no choices, the usage and, with
`--enable-per-request-metrics`, the server's own metrics of the request."""

from __future__ import annotations

import functools
from typing import Any, TypedDict

from splitbench.backends import client
from splitbench.backends.client import Reply, StreamApi, add_tokens, took_error

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
