"""The benchmark client: N streaming requests released together, every token timestamped.

Each request has its own thread and HTTP connection; a barrier releases them at once.
Token arrival times are taken as each streamed event is read, on one absolute clock
(CLOCK_REALTIME, integer nanoseconds), with a monotonic twin for intervals.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Reply:
    request_id: int
    t_send_ns: int = 0
    t_send_mono_ns: int = 0
    t_end_ns: int = 0
    http_status: int | None = None
    error_type: str | None = None  # exception class or server error type
    error_text: str | None = None
    tokens: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)


def _stream_one(
    url: str,
    body: dict[str, Any],
    reply: Reply,
    barrier: threading.Barrier,
    timeout: float,
    first_token: threading.Event,
) -> None:
    with httpx.Client(timeout=httpx.Timeout(timeout, connect=10)) as http:
        barrier.wait()
        reply.t_send_ns = time.time_ns()
        reply.t_send_mono_ns = time.monotonic_ns()
        try:
            with http.stream("POST", f"{url}/completion", json=body) as response:
                reply.http_status = response.status_code
                if response.status_code != 200:
                    _read_error(response, reply)
                    return
                for line in response.iter_lines():
                    if not line.startswith("data: "):
                        continue  # ":" keep-alive pings, blank separators
                    t_ns, t_mono = time.time_ns(), time.monotonic_ns()
                    event = json.loads(line[6:])
                    _take_event(event, t_ns, t_mono, reply)
                    if reply.tokens and not first_token.is_set():
                        first_token.set()
                    if event.get("stop"):
                        break
        except httpx.TimeoutException as exc:
            reply.error_type, reply.error_text = "timeout", str(exc)
        except (httpx.HTTPError, json.JSONDecodeError) as exc:
            reply.error_type, reply.error_text = type(exc).__name__, str(exc)
        finally:
            reply.t_end_ns = time.time_ns()


def _read_error(response: httpx.Response, reply: Reply) -> None:
    text = response.read().decode(errors="replace")
    reply.error_text = text[:2000]
    try:
        reply.error_type = json.loads(text)["error"].get("type")
    except (ValueError, KeyError, AttributeError, TypeError):
        reply.error_type = "http_error"


def _take_event(event: dict[str, Any], t_ns: int, t_mono: int, reply: Reply) -> None:
    if "error" in event:
        error = event["error"]
        kind = error.get("type") if isinstance(error, dict) else None
        reply.error_type = kind or "stream_error"
        reply.error_text = json.dumps(error)[:2000]
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
    for k in range(new):
        reply.tokens.append({
            "token_index": len(reply.tokens),
            "token_id": ids[k] if k < len(ids) else None,
            "t_ns": t_ns,
            "t_mono_ns": t_mono,
            "chunk_tokens": new,
            "server_cum_prompt_ms": timings.get("prompt_ms"),
            "server_cum_predicted_ms": timings.get("predicted_ms"),
            "server_cum_predicted_n": timings.get("predicted_n"),
        })


def run_concurrent(
    url: str,
    prompts: list[list[int]],
    n_predict: int,
    timeout: float,
    first_token: threading.Event | None = None,
) -> list[Reply]:
    """Send one streaming /completion per prompt, all released together.

    `first_token` is set when the first token of any request arrives (for telemetry
    that splits prefill from decode); it is set at the end in any case.
    """
    first_token = first_token or threading.Event()
    barrier = threading.Barrier(len(prompts))
    replies = [Reply(request_id=i) for i in range(len(prompts))]
    threads = []
    for reply, ids in zip(replies, prompts, strict=True):
        body = {
            "prompt": ids,
            "n_predict": n_predict,
            "ignore_eos": True,
            "temperature": 0,
            "cache_prompt": False,
            "stream": True,
            "timings_per_token": True,
        }
        thread = threading.Thread(
            target=_stream_one,
            args=(url, body, reply, barrier, timeout, first_token),
            daemon=True,
        )
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    first_token.set()
    return replies
