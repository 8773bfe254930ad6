"""Calls to a launch's own server: straight to it, one TLS context per process, a fresh
connection each time."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from splitbench.backends import server_http


class Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless the client closes
    seen: list[tuple[str, int, bytes]] = []

    def _reply(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (the server's name for it)
        self.seen.append((self.path, self.client_address[1], b""))
        self._reply(b'{"status": "ok"}')

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append((self.path, self.client_address[1], body))
        self._reply(b'{"tokens": [1, 2]}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Recorder.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_calls_reach_the_server_past_a_proxy_on_fresh_connections(server, monkeypatch):
    # A proxy in the environment is not for the pair's own addresses: nothing listens
    # on port 9, so a call sent through it would fail.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    server_http._client.cache_clear()
    assert server_http.get(f"{server}/health", timeout=5).json() == {"status": "ok"}
    reply = server_http.post(f"{server}/tokenize", {"content": "x"}, timeout=5)
    assert reply.json() == {"tokens": [1, 2]}
    assert server_http.get(f"{server}/health", timeout=5).status_code == 200
    paths = [path for path, _, _ in Recorder.seen]
    assert paths == ["/health", "/tokenize", "/health"]
    assert json.loads(Recorder.seen[1][2]) == {"content": "x"}
    # No connection kept between calls: a relaunched server never meets a stale one.
    assert len({port for _, port, _ in Recorder.seen}) == 3


def test_the_ca_bundle_is_loaded_once_per_process_not_per_call(server, monkeypatch):
    loads = []
    original = ssl.SSLContext.load_verify_locations

    def counted(self, *args, **kwargs):
        loads.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    server_http._client.cache_clear()
    for _ in range(5):
        assert server_http.get(f"{server}/health", timeout=5).status_code == 200
    assert len(loads) <= 1, loads
