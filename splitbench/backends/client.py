"""The benchmark client: N streaming requests released together, every token timestamped.

Any backend whose server streams server-sent events (`data: {json}` lines) over HTTP/1.1
uses it; what differs between servers (the path, the request body, what an event
carries) is the backend's `StreamApi`.

Each request has its own HTTP connection (a plain socket: an HTTP library's layers cost
~130 us of CPU per streamed chunk here). The requests are sent back to back, then one
thread reads every stream as data arrives (an event loop; reader threads cost lock
hand-offs and let one stream's parsing delay another's timestamps). Each event is stamped
with the arrival time of the TCP segment that completed it, on one absolute clock
(CLOCK_REALTIME, integer nanoseconds), with a monotonic twin for intervals: when the
client wakes up to read does not count. Segment times come from a packet socket
(`packet_clock`, needs CAP_NET_RAW), which sees every segment with its own stamp even
when several queued up while this process was not scheduled. Without it, each read's
kernel stamp is used: that is the arrival of the read's LAST segment, so tokens that
queued together share it (`coalesced_tokens` counts them).
"""

from __future__ import annotations

import gc
import json
import select
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict
from urllib.parse import urlsplit

from splitbench.backends.packet_clock import PacketClock
from splitbench.infra.packets import SO_TIMESTAMPNS, STAMP_SPACE, TIMESPEC

# A kernel stamp is trusted when it lies at most this far before the read returned
# (data can wait in the socket while the client is busy, but not for a minute).
STAMP_WINDOW_NS = 60 * 10**9


class TokenArrival(TypedDict):
    """One token of a reply (`add_tokens`): its place and id, its event's arrival on both
    clocks, how many tokens that event carried, and the server's cumulative figures where
    its events give them (llama.cpp's)."""

    token_index: int
    token_id: int | None
    t_ns: int
    t_mono_ns: int
    chunk_tokens: int
    server_cum_prompt_ms: NotRequired[float | None]
    server_cum_predicted_ms: NotRequired[float | None]
    server_cum_predicted_n: NotRequired[int | None]


@dataclass
class Reply:
    request_id: int
    t_send_ns: int = 0
    t_send_mono_ns: int = 0
    t_end_ns: int = 0
    http_status: int | None = None
    error_type: str | None = None  # exception class or server error type
    error_text: str | None = None
    tokens: list[TokenArrival] = field(default_factory=list)
    # The server's last event as it sent it (vLLM's: its usage event, with the finish
    # reason of the event before).
    final: dict[str, Any] = field(default_factory=dict)
    # Where the tokens' times come from: "segment" (each segment's own arrival, from
    # the packet socket), "kernel" (the receive stamp of the read's last segment),
    # "read" (when the read returned), "mixed", or None with no data read.
    arrival_clock: str | None = None


@dataclass(frozen=True)
class StreamApi:
    """What one server's streaming endpoint needs: its path, the request body for a
    prompt of token ids, and how one event's JSON adds to a reply (tokens with the
    event's arrival time, the final event, an error); where the server has slots, the
    body's key that puts each request of a release on the slot numbered by its place
    in the release (0 for the first), so that a release of N uses slots 0..N-1 every
    time, whatever ran before it."""

    path: str
    body: Callable[[list[int], int], dict[str, Any]]
    take_event: Callable[[dict[str, Any], int, int, Reply], None]
    slot_key: str | None = None

    def request(self, ids: list[int], n_predict: int, place: int) -> dict[str, Any]:
        """The body of the request at `place` in its release."""
        body = self.body(ids, n_predict)
        if self.slot_key:
            body[self.slot_key] = place
        return body


class _Stream:
    """One request's connection and its incremental HTTP/1.1 parse: status, headers,
    then the (chunked or plain) body split into events, each kept as raw bytes with the
    arrival time of the read that completed it. JSON is parsed after the stream ends."""

    def __init__(self, reply: Reply, sock: socket.socket, request: bytes) -> None:
        self.reply, self.sock, self.request = reply, sock, request
        self.head = b""  # bytes before the end of the headers
        self.raw = b""  # body bytes not yet de-chunked
        self.pending = b""  # de-chunked bytes not yet split into lines
        self.chunked: bool | None = None  # None until the headers are read
        self.error_body = b""
        self.events: list[tuple[int, int, bytes]] = []
        self.done = False
        self.port = sock.getsockname()[1]  # this end's port: how the packet clock knows it
        self.offset = 0  # response bytes received so far (the packet clock's stream offset)
        self.last_activity = time.monotonic()  # for the idle timeout
        self.clocks: set[str] = set()  # "segment", "kernel", "read": how bytes were stamped

    def feed(self, data: bytes, t_ns: int, t_mono: int) -> int:
        """Take received bytes; returns how many token events they completed."""
        if self.chunked is None:
            self.head += data
            if b"\r\n\r\n" not in self.head:
                return 0
            head, data = self.head.split(b"\r\n\r\n", 1)
            self._headers(head)
        if self.chunked:
            body, self.raw, self.done = _dechunk(self.raw + data)
        else:
            body = data
        if self.reply.http_status != 200:
            self.error_body += body
            return 0
        *lines, self.pending = (self.pending + body).split(b"\n")
        before = len(self.events)
        # Not ":" pings, blank lines or the OpenAI API's closing "[DONE]"; every event in
        # one read had arrived by then.
        self.events += [(t_ns, t_mono, line) for line in lines
                        if line.startswith(b"data: ") and line[6:].strip() != b"[DONE]"]
        return len(self.events) - before

    def _headers(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        self.reply.http_status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip()
                   for k, _, v in (line.partition(":") for line in lines[1:])}
        self.chunked = headers.get("transfer-encoding", "").lower() == "chunked"

    def close(self, api: StreamApi, error_type: str | None = None,
              error_text: str | None = None) -> None:
        """End the stream: record how it ended, then parse what it carried."""
        self.done = True
        self.reply.t_end_ns = time.time_ns()
        self.sock.close()
        reply = self.reply
        if self.clocks:
            reply.arrival_clock = self.clocks.pop() if len(self.clocks) == 1 else "mixed"
        if reply.http_status is not None and reply.http_status != 200:
            _read_error(self.error_body, reply)
        for (t_ns, t_mono, _), event in zip(self.events, _parse_events(self), strict=True):
            if event is not None:
                api.take_event(event, t_ns, t_mono, reply)
        if error_type is not None and reply.error_type is None:
            reply.error_type, reply.error_text = error_type, error_text


def _parse_events(stream: _Stream) -> list[dict | None]:
    """Every event's JSON: one C call for the whole stream, or, when some event is not
    JSON, one call each (that event is None, the reply's error says why, the rest stay)."""
    payloads = [line[6:] for _, _, line in stream.events]
    try:
        return json.loads(b"[" + b",".join(payloads) + b"]")
    except ValueError:
        pass
    parsed: list[dict | None] = []
    for payload in payloads:
        try:
            parsed.append(json.loads(payload))
        except ValueError as exc:
            parsed.append(None)
            stream.reply.error_type = "JSONDecodeError"
            stream.reply.error_text = f"{exc}: {payload[:200]!r}"
    return parsed


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


def took_error(event: dict[str, Any], reply: Reply) -> bool:
    """An error event (a server that fails mid-stream after its 200): the reply's error;
    True when the event was one."""
    if "error" not in event:
        return False
    error = event["error"]
    kind = error.get("type") if isinstance(error, dict) else None
    reply.error_type = kind or "stream_error"
    reply.error_text = json.dumps(error)[:2000]
    return True


def add_tokens(reply: Reply, count: int, ids: list[int], t_ns: int, t_mono: int,
               **server: Any) -> None:
    """`count` tokens that arrived in one event, each with the event's arrival time, its
    id where the event gives it, and the server's cumulative figures of that event."""
    for k in range(count):
        reply.tokens.append({
            "token_index": len(reply.tokens),
            "token_id": ids[k] if k < len(ids) else None,
            "t_ns": t_ns,
            "t_mono_ns": t_mono,
            "chunk_tokens": count,
            **server,
        })


def run_concurrent(
    api: StreamApi,
    url: str,
    prompts: list[list[int]],
    n_predict: int,
    timeout: float,
    on_first_token: Callable[[], None] | None = None,
) -> list[Reply]:
    """Send one streaming request per prompt to `api`'s endpoint, all released together,
    and read every stream in one thread (an event loop: no lock hand-offs between
    readers).

    `timeout` is per stream: the longest wait for its next bytes (a long prefill is
    silent), as with a blocking socket's timeout. `on_first_token` runs once, in the
    loop, when the first token of any request arrives (for telemetry that splits prefill
    from decode); it must be quick.
    """
    address = urlsplit(url)
    replies = [Reply(request_id=i) for i in range(len(prompts))]
    # Opened before connecting: a stream's byte offsets count from its SYN-ACK.
    clock = _packet_clock(address)
    # A reply's request_id is its place in the release (its slot, where the server has them).
    streams = [s for s in (_open(address, api.path, r,
                                 api.request(ids, n_predict, r.request_id))
                           for r, ids in zip(replies, prompts, strict=True)) if s]
    poller, open_streams = None, {}
    try:
        poller = select.epoll()
        for stream in streams:  # back to back: the sends are microseconds apart
            stream.reply.t_send_ns = time.time_ns()
            stream.reply.t_send_mono_ns = time.monotonic_ns()
            try:
                stream.sock.sendall(stream.request)
            except OSError as exc:
                stream.close(api, type(exc).__name__, str(exc))
                continue
            stream.sock.setblocking(False)
            stream.last_activity = time.monotonic()
            poller.register(stream.sock.fileno(), select.EPOLLIN)
            open_streams[stream.sock.fileno()] = stream
        # No garbage-collection pauses while tokens are being stamped.
        gc.disable()
        _read_all(api, poller, open_streams, timeout, on_first_token, clock)
    finally:
        gc.enable()
        if poller is not None:
            poller.close()
        if clock is not None:
            clock.close()
        for stream in streams:  # anything left open by an unexpected error
            stream.sock.close()
    return replies


def _packet_clock(address: Any) -> PacketClock | None:
    """The packet clock for the server's segments; None where it cannot run (then each
    read's kernel stamp is used, and the rows say so)."""
    try:
        ip = socket.gethostbyname(address.hostname)
    except OSError:
        return None  # the connection will fail and say why, per request
    return PacketClock.open(ip, address.port or 80)


def _open(address: Any, path: str, reply: Reply, body: dict[str, Any]) -> _Stream | None:
    payload = json.dumps(body).encode()
    request = (f"POST {path} HTTP/1.1\r\nHost: {address.netloc}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
               "Connection: close\r\n\r\n").encode() + payload
    try:
        sock = socket.create_connection((address.hostname, address.port or 80), timeout=10)
    except OSError as exc:
        reply.error_type, reply.error_text = type(exc).__name__, str(exc)
        reply.t_send_ns = reply.t_end_ns = time.time_ns()
        return None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # The kernel stamps each segment when it arrives; recvmsg hands that stamp over, so
    # a token's time does not depend on when this process got scheduled to read it.
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    return _Stream(reply, sock, request)


def _receive(sock: socket.socket) -> tuple[bytes, tuple[str, str] | None, int, str]:
    """One read and when its data arrived (absolute ns, and which clock said so): the
    kernel's receive stamp of the last segment read (SO_TIMESTAMPNS), or the time the
    read returned where the kernel gave none. The fallback where no packet clock runs."""
    try:
        data, ancillary, _, _ = sock.recvmsg(65536, STAMP_SPACE)
    except OSError as exc:
        return b"", (type(exc).__name__, str(exc)), time.time_ns(), "read"
    if ancillary:  # only the stamp is asked for, so it is the one item when present
        level, kind, payload = ancillary[0]
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
            seconds, nanos = TIMESPEC.unpack_from(payload)
            return data, None, seconds * 1_000_000_000 + nanos, "kernel"
    return data, None, time.time_ns(), "read"


def _stamped(stream: _Stream, data: bytes, t_read: int, read_clock: str,
             clock: PacketClock | None, now_ns: int) -> list[tuple[bytes, int, str]]:
    """What one read returned, cut at segment boundaries, each piece with its own
    segment's arrival ("segment"), or with the read's stamp where no segment was
    captured (no packet clock, or a packet the kernel dropped)."""
    if clock is None:
        pieces: list[tuple[bytes, int | None]] = [(data, None)]
    else:
        pieces = clock.pieces(stream.port, stream.offset, data)
    stream.offset += len(data)
    out = []
    for piece, t_segment in pieces:
        # A stamp is trusted when it lies at most STAMP_WINDOW_NS before now (data can
        # wait while the client is busy, but not for a minute): else a clock step.
        if t_segment is not None and now_ns - STAMP_WINDOW_NS <= t_segment <= now_ns:
            out.append((piece, t_segment, "segment"))
        elif read_clock == "kernel" and now_ns - STAMP_WINDOW_NS <= t_read <= now_ns:
            out.append((piece, t_read, "kernel"))
        else:
            out.append((piece, now_ns, "read"))
    return out


# Two clock reads back to back take well under a microsecond; longer, the thread lost its CPU.
CLOCK_PAIR_NS = 20_000


def clock_pair(tries: int = 5) -> tuple[int, int]:
    """The monotonic and the wall clock's now, read as one moment: the reads are retried
    while something ran between them (a lost CPU would shift every arrival mapped from
    one clock to the other by that much)."""
    for _ in range(tries):
        before = time.monotonic_ns()
        now_ns = time.time_ns()
        after = time.monotonic_ns()
        if after - before <= CLOCK_PAIR_NS:
            break
    return (before + after) // 2, now_ns


def _close_silent(api: StreamApi, poller: select.epoll, streams: dict[int, _Stream],
                  now: float, idle_timeout: float) -> None:
    for fd, stream in list(streams.items()):
        if now - stream.last_activity > idle_timeout:
            poller.unregister(fd)
            del streams[fd]
            stream.close(api, "timeout", f"nothing received for {idle_timeout} s "
                                         "(request_timeout_s)")


def _read_all(api: StreamApi, poller: select.epoll, streams: dict[int, _Stream],
              idle_timeout: float,
              on_first_token: Callable[[], None] | None,
              clock: PacketClock | None) -> None:
    """The hot loop: wait, receive, stamp, split. Everything else waits for the end."""
    waiting_first = on_first_token is not None
    next_check = 0.0
    while streams:
        now = time.monotonic()
        if now >= next_check:  # silent streams, checked 10 times a second, not per token
            _close_silent(api, poller, streams, now, idle_timeout)
            if not streams:
                return
            next_check = now + 0.1
        # Receive every ready stream before parsing any: one stream's parsing must not
        # delay the next one's read.
        received = [(fd, *_receive(streams[fd].sock)) for fd, _ in poller.poll(0.1)]
        if clock is not None:
            # The device hands a packet to the packet socket before TCP queues its
            # bytes, so every segment read above is already waiting there.
            clock.drain()
        now_mono, now_ns = clock_pair()
        for fd, data, error, t_read, read_clock in received:
            stream = streams[fd]
            if data:
                stream.last_activity = now_mono / 1e9
                try:
                    for piece, t_ns, kind in _stamped(stream, data, t_read, read_clock,
                                                      clock, now_ns):
                        if stream.done:  # the last chunk came; what follows is not data
                            break
                        stream.clocks.add(kind)
                        # Each arrival on the monotonic clock too: both advance together.
                        if (stream.feed(piece, t_ns, t_ns + now_mono - now_ns)
                                and waiting_first):
                            waiting_first = False
                            on_first_token()
                except (ValueError, IndexError) as exc:  # a malformed reply: this stream
                    data, error = b"", ("ProtocolError", str(exc))
            if data and not stream.done:
                continue
            poller.unregister(fd)
            del streams[fd]
            # A plain (unchunked) body ends at EOF; a chunked one at its last chunk.
            if error is None and not (stream.done or stream.chunked is False):
                error = ("ConnectionResetError", "closed before the headers"
                         if stream.chunked is None else "stream ended before its last chunk")
            stream.close(api, *(error or (None, None)))
