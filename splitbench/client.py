"""The benchmark client: N streaming requests released together, every token timestamped.

Each request has its own thread and HTTP connection (a plain socket: an HTTP library's
layers cost ~130 us of CPU per streamed chunk here); a barrier releases them at once.
Token arrival times are taken as each streamed event is read, on one absolute clock
(CLOCK_REALTIME, integer nanoseconds), with a monotonic twin for intervals.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


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
    """One streaming request over a plain socket: the hot loop only receives, de-chunks,
    splits events and timestamps them; JSON is parsed after the stream ends, so parsing
    never delays a later token's timestamp."""
    address = urlsplit(url)
    payload = json.dumps(body).encode()
    request = (f"POST /completion HTTP/1.1\r\nHost: {address.netloc}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
               "Connection: close\r\n\r\n").encode() + payload
    events: list[tuple[int, int, bytes]] = []
    try:
        sock = socket.create_connection((address.hostname, address.port), timeout=10)
    except OSError as exc:
        barrier.wait()
        reply.error_type, reply.error_text = type(exc).__name__, str(exc)
        reply.t_send_ns = reply.t_end_ns = time.time_ns()
        return
    with sock:
        sock.settimeout(timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        barrier.wait()
        reply.t_send_ns = time.time_ns()
        reply.t_send_mono_ns = time.monotonic_ns()
        try:
            sock.sendall(request)
            stream = _Response(sock)
            reply.http_status = stream.status
            if stream.status != 200:
                _read_error(stream.read_all(), reply)
                return
            pending = b""
            for chunk in stream.body():
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for line in complete:
                    if line.startswith(b"data: "):  # not ":" pings or blank lines
                        # Stamped as each event is taken, like a line-by-line reader.
                        events.append((time.time_ns(), time.monotonic_ns(), line))
                        first_token.set()
                if complete and b'"stop":true' in chunk:
                    break
        except TimeoutError as exc:
            reply.error_type, reply.error_text = "timeout", str(exc)
        except (OSError, ValueError) as exc:
            reply.error_type, reply.error_text = type(exc).__name__, str(exc)
        finally:
            reply.t_end_ns = time.time_ns()
    try:
        for t_ns, t_mono, line in events:
            _take_event(json.loads(line[6:]), t_ns, t_mono, reply)
    except ValueError as exc:
        reply.error_type, reply.error_text = "JSONDecodeError", str(exc)


class _Response:
    """Just enough HTTP/1.1 to read a streamed reply: status, headers, chunked body."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            self._receive()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.strip().lower(): v.strip()
                        for k, _, v in (line.partition(":") for line in lines[1:])}
        self.chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"

    def _receive(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionResetError("server closed the connection")
        self.buffer += data

    def body(self) -> Iterator[bytes]:
        """Body bytes as they arrive."""
        raw = self.buffer
        self.buffer = b""
        while True:
            if self.chunked:
                data, raw, done = _dechunk(raw)
            else:
                data, raw, done = raw, b"", False
            if data:
                yield data
            if done:
                return
            try:
                received = self.sock.recv(65536)
            except ConnectionResetError:
                received = b""
            if not received:
                if self.chunked:
                    raise ConnectionResetError("stream ended before its last chunk")
                return
            raw += received

    def read_all(self) -> bytes:
        return b"".join(self.body())


def _dechunk(raw: bytes) -> tuple[bytes, bytes, bool]:
    """Complete chunks' payload, the unconsumed rest, and whether the last chunk came."""
    out = bytearray()
    while (end := raw.find(b"\r\n")) >= 0:
        size = int(raw[:end].split(b";")[0], 16)
        if size == 0:
            return bytes(out), b"", True
        if len(raw) < end + 2 + size + 2:
            break
        out += raw[end + 2:end + 2 + size]
        raw = raw[end + 2 + size + 2:]
    return bytes(out), raw, False


def _read_error(body: bytes, reply: Reply) -> None:
    text = body.decode(errors="replace")
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
