"""backends.lifecycle.wait_healthy, the one start-up wait of every backend: a process
that ends fails the launch at once with its log's tail; a server that never answers
fails it at the deadline, naming the setting; a healthy one returns."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from splitbench.backends import lifecycle
from splitbench.infra import procs
from splitbench.infra.hosts import Host

LOCAL = Host("local")


def spawn(state_dir, key: str, script: str) -> dict:
    return LOCAL.spawn(["sh", "-c", script], role="other", key=key,
                       log_path=state_dir / f"{key}.log")


def test_a_process_that_ends_fails_the_wait_at_once_with_its_log(state_dir):
    spawn(state_dir, "dies", "echo 'no model here'; exit 3")
    started = time.monotonic()
    with pytest.raises(lifecycle.LaunchError) as raised:
        lifecycle.wait_healthy("http://127.0.0.1:9", {"the server": lambda: procs.find("dies")},
                              30, "the server")
    assert time.monotonic() - started < 10  # not the 30 s deadline
    assert str(raised.value).startswith("the server exited with code 3 during start-up")
    assert "no model here" in str(raised.value)


def test_a_server_that_never_answers_fails_at_its_deadline_naming_the_setting(state_dir):
    spawn(state_dir, "quiet", "echo 'still loading'; exec sleep 30")
    with pytest.raises(lifecycle.LaunchError) as raised:
        lifecycle.wait_healthy("http://127.0.0.1:9", {"rank 0": lambda: procs.find("quiet")},
                              1.5, "the launch", "launch_timeout_s")
    text = str(raised.value)
    assert text.startswith("the launch not healthy after 1.5 s (launch_timeout_s)"), text
    assert "rank 0:\nstill loading" in text


def test_a_server_ends_the_wait_once_it_is_healthy_not_before(state_dir):
    """A server that answers /health with 503 while it loads, then 200: the wait asks
    while it loads, returns once it is healthy, and at once (not at the deadline)."""
    spawn(state_dir, "alive", "exec sleep 30")
    loaded_at = time.monotonic() + 1.0
    answers: list[tuple[float, int]] = []

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802  (the handler's own name)
            code = 404
            if self.path == "/health":
                code = 200 if time.monotonic() >= loaded_at else 503
                answers.append((time.monotonic(), code))
            self.send_response(code)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        lifecycle.wait_healthy(url, {"server": lambda: procs.find("alive")}, 60, "server")
        returned = time.monotonic()
    finally:
        server.shutdown()
    codes = [code for _, code in answers]
    assert 503 in codes, codes  # it asked while the server was loading
    assert codes[-1] == 200 and codes.count(200) == 1, codes  # it stopped at the first 200
    healthy_at = answers[-1][0]
    assert loaded_at <= healthy_at <= returned
    # Not at the deadline: one poll (0.2 s) after loading, where the deadline is 60 s
    # (the bound only tells the two apart, whatever else the machine is doing).
    assert returned - loaded_at < 30, returned - loaded_at
