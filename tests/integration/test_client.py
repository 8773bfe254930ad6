"""The streaming client against small real HTTP servers on loopback: chunked and plain
bodies, error replies, a stream cut short, a timeout, and the first-token hook."""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections.abc import Callable

import pytest

from splitbench.backends import client as stream_client
from splitbench.backends.llamacpp import api
from splitbench.backends.packet_clock import PacketClock
from tests.conftest import needs_root
from tests.support import free_port
from tests.support.starved_reader import run_starved
from tests.support.synthetic_server import read_request


def _serve(handler: Callable[[socket.socket, dict], None], requests: int = 1) -> str:
    """A one-shot server: reads each request, hands the socket and body to handler."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def loop() -> None:
        with server:
            for _ in range(requests):
                conn, _ = server.accept()
                threading.Thread(target=_one, args=(conn, handler), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}"


def _one(conn: socket.socket, handler: Callable) -> None:
    with conn:
        handler(conn, read_request(conn))


def _event(i: int) -> bytes:
    return f"data: {json.dumps({'tokens': [i], 'tokens_predicted': i + 1})}\n\n".encode()


FINAL = b'data: {"stop": true, "timings": {"predicted_n": 3}}\n\n'


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def chunked_stream(conn: socket.socket, body: dict) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    for i in range(body["n_predict"]):
        conn.sendall(_chunk(_event(i)))
        time.sleep(0.02)
    conn.sendall(_chunk(FINAL) + b"0\r\n\r\n")


def _paced(sent: list[tuple[int, int]], tokens: int = 3, gap_s: float = 0.03) -> Callable:
    """A server that sends one token every gap_s, recording the instants just before
    and just after each send."""
    def handler(conn: socket.socket, body: dict) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(tokens):
            before = time.time_ns()
            conn.sendall(_chunk(_event(i)))
            sent.append((before, time.time_ns()))
            time.sleep(gap_s)
        time.sleep(0.3)  # the end comes after the client's next read
        conn.sendall(_chunk(FINAL) + b"0\r\n\r\n")
    return handler


def _until_sent(sent: list[tuple[int, int]], tokens: int = 3) -> Callable[[], None]:
    """A reader's hook that holds it until the paced server has sent every token, however
    slowly a busy machine lets that go: the tokens are then queued for its next read."""
    def hold() -> None:
        deadline = time.monotonic() + 30
        while len(sent) < tokens and time.monotonic() < deadline:
            time.sleep(0.005)
    return hold


@needs_root()
def test_tokens_that_queue_while_the_reader_waits_keep_their_own_arrival():
    sent: list[tuple[int, int]] = []
    # The first-token hook runs in the client's loop: for 200 ms nothing is read, so
    # tokens 1 and 2 queue in one TCP receive buffer; the packet clock still has each
    # segment's own arrival.
    reply = api.run_concurrent(_serve(_paced(sent)), [[1]], 3, timeout=10,
                                  on_first_token=lambda: time.sleep(0.2))[0]
    assert reply.arrival_clock == "segment"
    times = [t["t_ns"] for t in reply.tokens]
    for t, (before, after) in zip(times, sent, strict=True):
        # On loopback the packet is stamped inside the sender's send call.
        assert before <= t <= after + 200_000, (t - before, after - before)
    assert times[2] - times[1] >= 25e6  # 30 ms apart, not one shared stamp


def test_without_a_packet_clock_queued_tokens_share_the_last_segment_s_stamp(monkeypatch):
    # The fallback (no CAP_NET_RAW): each read's kernel stamp is its last segment's
    # arrival, so tokens read together share it, and the row says which clock it was.
    monkeypatch.setattr(PacketClock, "open", classmethod(lambda *a: None))
    sent: list[tuple[int, int]] = []
    reply = api.run_concurrent(_serve(_paced(sent)), [[1]], 3, timeout=10,
                                  on_first_token=_until_sent(sent))[0]
    assert reply.arrival_clock == "kernel"
    times = [t["t_ns"] for t in reply.tokens]
    assert all(t >= before for t, (before, _) in zip(times, sent, strict=True))
    # Read together, so both carry the later segment's arrival.
    assert times[1] == times[2]
    # That stamp is the later segment's arrival, stamped inside the sender's send call on
    # loopback, not the read's own time (after the last send): whatever the scheduler did
    # to the reader, it lies within that send.
    before, after = sent[2]
    assert before <= times[2] <= after + 200_000, (times[2] - before, after - before)


def test_without_any_stamp_a_token_gets_the_read_s_own_time(monkeypatch):
    """The last fallback: no packet clock and no kernel stamp. Tokens that queued while
    the reader was busy get the time they were read, and the row says so ("read")."""
    monkeypatch.setattr(PacketClock, "open", classmethod(lambda *a: None))
    monkeypatch.setattr(stream_client, "STAMP_SPACE", 0)  # no room for the kernel's stamp
    sent: list[tuple[int, int]] = []
    woke: list[int] = []

    def busy() -> None:
        _until_sent(sent)()
        time.sleep(0.05)
        woke.append(time.time_ns())

    reply = api.run_concurrent(_serve(_paced(sent)), [[1]], 3, timeout=10,
                                  on_first_token=busy)[0]
    assert reply.arrival_clock == "read"
    times = [t["t_ns"] for t in reply.tokens]
    assert times[1] >= woke[0] and times[2] >= woke[0]  # read after the reader woke
    assert sent[1][1] < woke[0]  # though token 1 had arrived long before


def test_chunked_stream_is_timestamped_token_by_token():
    url = _serve(chunked_stream, requests=2)
    firsts = []
    replies = api.run_concurrent(url, [[1, 2], [3, 4]], 3, timeout=10,
                                    on_first_token=lambda: firsts.append(time.time_ns()))
    assert len(firsts) == 1
    for reply in replies:
        assert reply.http_status == 200 and reply.error_type is None
        assert [t["token_id"] for t in reply.tokens] == [0, 1, 2]
        times = [t["t_ns"] for t in reply.tokens]
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        assert all(gap >= 15e6 for gap in gaps), gaps  # 20 ms apart, never stamped together
        assert reply.final["timings"]["predicted_n"] == 3
    # The hook runs once the release's first token is in, never before it.
    assert firsts[0] >= min(r.tokens[0]["t_ns"] for r in replies)


def test_plain_body_ends_at_close():
    def plain(conn: socket.socket, body: dict) -> None:
        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + _event(0) + _event(1) + FINAL)

    reply = api.run_concurrent(_serve(plain), [[1]], 2, timeout=10)[0]
    assert reply.error_type is None
    assert len(reply.tokens) == 2


def test_error_reply_keeps_status_and_type():
    def refuse(conn: socket.socket, body: dict) -> None:
        payload = json.dumps({"error": {"code": 400, "type": "exceed_context_size_error",
                                        "message": "too long"}}).encode()
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: "
                     + str(len(payload)).encode() + b"\r\n\r\n" + payload)

    reply = api.run_concurrent(_serve(refuse), [[1]], 4, timeout=10)[0]
    assert reply.http_status == 400
    assert reply.error_type == "exceed_context_size_error"
    assert reply.tokens == []


def test_stream_cut_short_is_an_error_with_its_tokens_kept():
    def cut(conn: socket.socket, body: dict) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + _chunk(_event(0)))

    reply = api.run_concurrent(_serve(cut), [[1]], 4, timeout=10)[0]
    assert reply.error_type == "ConnectionResetError"
    assert len(reply.tokens) == 1


def test_silent_server_times_out():
    """At its timeout (0.5 s), not when the server gives up (30 s): the bound only
    tells the two apart."""
    def silent(conn: socket.socket, body: dict) -> None:
        time.sleep(30)

    started = time.monotonic()
    reply = api.run_concurrent(_serve(silent), [[1]], 4, timeout=0.5)[0]
    assert reply.error_type == "timeout"
    assert time.monotonic() - started < 15


def test_refused_connection_is_an_error_not_an_exception():
    port = free_port()  # a port nothing listens on
    reply = api.run_concurrent(f"http://127.0.0.1:{port}", [[1]], 4, timeout=5)[0]
    assert reply.error_type == "ConnectionRefusedError"


@pytest.mark.parametrize("split", [1, 7])
def test_events_split_across_reads_are_reassembled(split):
    def dribble(conn: socket.socket, body: dict) -> None:
        stream = b"".join(_chunk(_event(i)) for i in range(3)) + _chunk(FINAL) + b"0\r\n\r\n"
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for k in range(0, len(stream), split):
            conn.sendall(stream[k:k + split])

    conn_reply = api.run_concurrent(_serve(dribble), [[1]], 3, timeout=10)[0]
    assert conn_reply.error_type is None
    assert [t["token_id"] for t in conn_reply.tokens] == [0, 1, 2]


def test_timeout_is_per_silence_not_per_request():
    def slow(conn: socket.socket, body: dict) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(4):
            time.sleep(0.3)  # each gap under the timeout, the whole reply over it
            conn.sendall(_chunk(_event(i)))
        conn.sendall(_chunk(FINAL) + b"0\r\n\r\n")

    reply = api.run_concurrent(_serve(slow), [[1]], 4, timeout=0.8)[0]
    assert reply.error_type is None
    assert len(reply.tokens) == 4


def test_a_malformed_stream_fails_alone():
    def broken(conn: socket.socket, body: dict) -> None:
        if body["prompt"] == [1]:
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
            time.sleep(0.2)
        else:
            chunked_stream(conn, body)

    replies = api.run_concurrent(_serve(broken, requests=2), [[1], [2]], 3, timeout=10)
    assert replies[0].error_type == "ProtocolError"
    assert replies[1].error_type is None and len(replies[1].tokens) == 3


def test_one_event_that_is_not_json_keeps_the_others():
    def odd(conn: socket.socket, body: dict) -> None:
        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + _event(0) + b"data: {cut\n\n" + _event(1))

    reply = api.run_concurrent(_serve(odd), [[1]], 2, timeout=10)[0]
    assert reply.error_type == "JSONDecodeError"
    assert [t["token_id"] for t in reply.tokens] == [0, 1]








@needs_root()
def test_a_stopped_reader_still_gets_each_token_s_own_arrival():
    sent: list[tuple[int, int]] = []
    started = threading.Event()

    def stream(conn: socket.socket, body: dict) -> None:
        started.set()
        _paced(sent, tokens=body["n_predict"], gap_s=0.002)(conn, body)

    pauses: list[tuple[int, int]] = []
    url = _serve(stream)
    replies = run_starved([url, "1", "300"], started, pauses)
    times = replies[0]["times"]
    assert replies[0]["clock"] == "segment"
    assert len(times) == len(sent) == 300
    assert len(set(times)) == 300  # no two tokens share a time
    errors = [t - before for t, (before, _) in zip(times, sent, strict=True)]
    late = [t - after for t, (_, after) in zip(times, sent, strict=True)]
    assert min(errors) >= 0 and max(late) <= 200_000, (min(errors), max(late))
    # The stops really starved the reader: tokens were sent while it was stopped.
    during = sum(any(a <= before <= b for a, b in pauses) for before, _ in sent)
    assert len(pauses) >= 4 and during >= 50, (len(pauses), during)


def test_a_last_chunk_split_across_segments_read_together_ends_the_stream():
    def split_end(conn: socket.socket, body: dict) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        conn.sendall(_chunk(_event(0)))
        time.sleep(0.05)  # the client is asleep in its first-token hook from here
        for part in (_chunk(_event(1)), _chunk(FINAL), b"0\r\n", b"\r\n"):
            conn.sendall(part)
            time.sleep(0.005)
        time.sleep(0.3)

    reply = api.run_concurrent(_serve(split_end), [[1]], 2, timeout=10,
                                  on_first_token=lambda: time.sleep(0.2))[0]
    assert reply.error_type is None, reply.error_text
    assert [t["token_id"] for t in reply.tokens] == [0, 1]


def test_the_openai_closing_done_line_is_not_an_event():
    def closed(conn: socket.socket, body: dict) -> None:
        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + _event(0) + _event(1) + b"data: [DONE]\n\n")

    reply = api.run_concurrent(_serve(closed), [[1]], 2, timeout=10)[0]
    assert reply.error_type is None
    assert [t["token_id"] for t in reply.tokens] == [0, 1]
