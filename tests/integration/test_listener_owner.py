"""A launch's wait for its listener takes only the process it started: another process,
another user's included, that holds the worker's address and port first is refused at
once by name, never taken for the worker (which would be sent the model's weights and
every activation). Real processes and sockets on loopback."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from splitbench.infra import procs
from splitbench.infra.hosts import Host, HostError
from tests.conftest import needs_root
from tests.support import free_port

LOCAL = Host("local")
# A listener of its own, in its own process: what a squatting user would run.
LISTEN = ("import socket, sys, time; s = socket.socket(); "
          "s.bind((sys.argv[2], int(sys.argv[1]))); s.listen(); print('up', flush=True); "
          "time.sleep(60)")


def probe_server(state_dir, port: int) -> dict:
    """splitbench's own latency probe server on `port`, started as a worker is."""
    return LOCAL.spawn([sys.executable, "-m", "splitbench.remote.probe", "serve",
                        "127.0.0.1", str(port)], role="probe", key=f"probe-{port}",
                       log_path=state_dir / f"probe-{port}.log")


@contextlib.contextmanager
def squatting(port: int, addr: str = "127.0.0.1", uid: int | None = None,
              netns: str | None = None) -> Iterator[subprocess.Popen]:
    """A listener on addr:port of its own (of `uid`, in `netns`), there until the end."""
    prefix = (["ip", "netns", "exec", netns] if netns else []) + (
        ["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups"] if uid else [])
    squatter = subprocess.Popen([*prefix, sys.executable, "-c", LISTEN, str(port), addr],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout.readline().strip() == "up"
        yield squatter
    finally:
        squatter.kill()
        squatter.wait()


def test_the_process_it_started_is_taken(state_dir):
    port = free_port()
    server = probe_server(state_dir, port)
    LOCAL.wait_listening("127.0.0.1", port, timeout=10, server=server)
    assert LOCAL.session_of(server["pid"]) == server["pid"]


def test_a_listener_that_is_not_the_runs_is_refused_at_once(state_dir):
    port = free_port()
    with squatting(port) as squatter:
        server = probe_server(state_dir, port)
        started = time.monotonic()
        with pytest.raises(HostError) as raised:
            LOCAL.wait_listening("127.0.0.1", port, timeout=20, server=server)
        assert time.monotonic() - started < 5  # not the 20 s deadline
    text = str(raised.value)
    assert f"127.0.0.1:{port} is held by a process that is not this run's probe " \
           f"(pid {squatter.pid}, uid 0)" in text, text
    assert "another user may be posing as it" in text


@needs_root()
def test_another_users_listener_is_refused_by_pid(state_dir):
    port = free_port()
    with squatting(port, uid=4242) as squatter:
        held = rf"not this run's probe \(pid {squatter.pid}, uid 4242\)"
        with pytest.raises(HostError, match=held):
            LOCAL.wait_listening("127.0.0.1", port, timeout=20,
                                 server=probe_server(state_dir, port))


def test_a_listener_whose_pid_this_user_cannot_see_is_named_so(monkeypatch):
    """What `ss -p` prints to an ordinary user for another user's socket: no process."""
    line = "LISTEN 0 128 10.0.0.2:50052 0.0.0.0:*"
    monkeypatch.setattr(Host, "run", lambda self, argv, **kw: subprocess.CompletedProcess(
        argv, 0, stdout=line + "\n" if argv[0] == "ss" else "", stderr=""))
    with pytest.raises(HostError, match="another user's: this user cannot see its pid"):
        Host("b").wait_listening("10.0.0.2", 50052, timeout=5,
                                 server={"pid": 99999999, "role": "rpc-server"})


@needs_root()
@pytest.mark.slow  # a real link and launch attempt: about 5 s
@pytest.mark.timeout(300)
def test_another_user_on_b_holding_the_worker_port_gets_nothing(state_dir, tmp_path):
    """The issue's attack: another user on B binds the worker's address and port before
    the launch. The launch fails naming that process and its uid, and llama-server is
    never started: no connection ever reaches the squatter's socket."""
    from splitbench import pairs
    from splitbench.backends.llamacpp import gguf_model, servers, toolchain

    link = pairs.ensure_link({"pair": "sq", "link": "plain", "index": 1, "mode": "embedded"})
    port = link.ports.worker(0)
    with squatting(port, link.addr_b, uid=4242, netns=link.host_b.netns) as squatter:
        gguf = tmp_path / "tiny.gguf"
        spec = {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_head_kv": 2, "n_ff": 128,
                "n_vocab": 256, "context_length": 512, "seed": 1}
        gguf_model.write_synthetic(spec, gguf)
        tools = toolchain.record("sq", "pip", {"a": {}, "b": {}}, tmp_path / "tools.json")
        settings = {"layers_on_b": 1, "threads": 1, "slots": 1, "ctx_per_slot": 256,
                    "n_ctx": 256}
        with pytest.raises(HostError) as raised:
            servers.ensure(link, settings, str(gguf),
                           gguf_model.describe({"synthetic": spec}, gguf)["sha256"], tools)
        # Its accept queue (ss's Recv-Q of a listener) never held a connection.
        queue = link.host_b.run(["ss", "-Hltn", f"src {link.addr_b}:{port}"]).stdout
    text = str(raised.value)
    assert f"{link.addr_b}:{port} is held by a process that is not this run's rpc-server " \
           f"(pid {squatter.pid}, uid 4242)" in text, text
    assert queue.split()[1] == "0", queue
    assert not any(p["role"] == "llama-server" for p in procs.all_procs())

