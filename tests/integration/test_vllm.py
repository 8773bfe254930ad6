"""The vLLM backend against real vLLM servers: TP=2 and PP=2 across the lab's namespaces,
a shaped link, greedy output against a single-host server, a host B that dies mid-cell,
a worker that never comes, and nothing left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from splitbench import models, plan
from splitbench.backends import lifecycle
from splitbench.backends.prompts import prompt
from splitbench.backends.vllm import api, hf_model, servers
from splitbench.backends.vllm import toolchain as vllm_toolchain
from splitbench.backends.vllm.api import SERVED_NAME
from splitbench.backends.vllm.setup import executable
from splitbench.configuration import parsed
from splitbench.infra import procs, teardown, telemetry
from splitbench.links import lab
from tests.conftest import ROOT, needs_root

SHAPE = {"n_layer": 2, "n_embd": 128, "n_head": 4, "n_head_kv": 2, "n_ff": 256,
         "n_vocab": 1024, "context_length": 8192, "seed": 5}
VENV = str(ROOT / ".venv-vllm")

pytestmark = [
    pytest.mark.slow,  # vLLM's two ranks across the lab's namespaces
    pytest.mark.timeout(600),
    needs_root(),
    pytest.mark.skipif(not executable(VENV).exists(),
                       reason="vLLM not installed (./bootstrap.sh vllm; ./bootstrap.sh test "
                              "installs it)"),
]


# vLLM's graph compilation is left out of the TP launches here (about 34 s of every
# start on 2 cores): what these tests prove is how the model is split, what crosses the
# link, and how launches start, fail and stop, all the same in eager mode. PP=2 runs
# compiled: in eager mode this vLLM's second stage fails its first request (an
# AssertionError in Worker_PP1), and so is the suite's one compiled start; the backends
# comparison (test_backends_compared.py) and the SSH pair (test_vllm_ssh.py) run eager.
EAGER = ["--enforce-eager"]


def config(split: dict, dtype: str = "float32") -> dict:
    eager = EAGER if "pipeline_parallel" not in split else []
    vllm = {**split, "dtype": dtype, "launch_timeout_s": 300, "extra_args": eager}
    return {"pairs": {"vx": {"mode": "embedded", "hosts": {"a": {}, "b": {}},
                             "links": {"plain": {}}}},
            "models": {"m": {"synthetic": SHAPE, "backend": "vllm", "vllm": vllm}},
            "contexts": {"short": 32, "long": 512}, "concurrency": [1],
            "cell": {"n_predict": 32}, "measurement_version": 1, "baseline_link": "plain",
            "toolchain": {"source": "pip"}}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The model as a Hugging Face directory, both hosts' vLLM, in a private state
    directory torn down at the end (nothing of the module's may stay)."""
    tmp = tmp_path_factory.mktemp("vllm")
    old = os.environ.get("SPLITBENCH_STATE")
    os.environ["SPLITBENCH_STATE"] = str(tmp / "state")
    shm_before = set(os.listdir("/dev/shm"))
    procs.record_process = _record_sessions
    try:
        hf_model.write_synthetic_hf(SHAPE, tmp / "m.hf")
        model = models.describe({"synthetic": SHAPE, "backend": "vllm"}, tmp / "m.hf")
        tools = vllm_toolchain.record("vx", {"a": {}, "b": {}}, VENV, tmp / "tools.json")
        assert tools["status"] == "ok", tools
        yield {"tmp": tmp, "model": model, "tools": tools}
    finally:
        teardown.teardown()
        procs.record_process = _record_process
        if old is None:
            os.environ.pop("SPLITBENCH_STATE", None)
        else:
            os.environ["SPLITBENCH_STATE"] = old
    assert not ours_running(tmp), ours_running(tmp)
    assert set(os.listdir("/dev/shm")) <= shm_before  # no /dev/shm file of ours is left


# The sessions of every process this module started: each is started in a session of its
# own (procs.spawn), and vLLM's engine and workers stay in their rank's, also once it
# is gone.
SESSIONS: set[int] = set()


def ours_running(tmp: Path) -> list[str]:
    """This module's vLLM processes still running, and no other test's or program's:
    its servers (their command lines name its model) and the vLLM engines and workers
    (VLLM::...) in the sessions it started."""
    ours = []
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):  # not a process, or one that has just ended
            continue
        if stat[0] == "Z":  # not running
            continue
        # The module's directory is named vllm0: a link relay started from it is not vLLM.
        own_args = args.replace(str(tmp), "<tmp>").lower()
        if ("vllm serve" in args and str(tmp) in args) or (
                int(stat[3]) in SESSIONS and "vllm" in own_args):
            ours.append(f"{proc.name} {args}")
    return ours


def _record_sessions(record: dict) -> dict:
    if not record.get("remote"):
        SESSIONS.add(record["pid"])  # its own session: the session id is its pid
    return _record_process(record)


_record_process = procs.record_process


def launch(setup: dict, split: dict, link: str = "plain", **tools_override):
    cfg = config(split)
    the_link = lab.ensure_link(plan.link_slice(parsed(cfg), "vx", link))
    tools = {**setup["tools"], **tools_override}
    server = servers.ensure(the_link, plan.server_slice(parsed(cfg), "m"), setup["model"]["path"],
                            setup["model"]["sha256"], tools)
    return the_link, server


def ask(link, server, length: int, n_predict: int = 32, nonce: int = 3) -> tuple:
    """One request, its row and the traffic between the hosts during it (the reply
    carries its prompt as `prompt_ids`)."""
    with link.host_a.entered():
        ids = prompt(api.token_pool(server.url), length, nonce)
        traffic = telemetry.RpcTraffic(link.addr_b, None)
        reply = api.run_concurrent(server.url, [ids], n_predict, 120,
                                      traffic.at_first_token)[0]
        traffic.finish()
    row = api.request_row(reply, length, n_predict, True, 1.0)
    reply.prompt_ids = ids
    return reply, row, traffic.figures([t["t_mono_ns"] for t in reply.tokens])


def single_host_tokens(setup: dict, link, ids: list[int], n_predict: int) -> list[int]:
    """Greedy tokens of the same model served by one vLLM on host A alone."""
    host = link.host_a
    argv = [setup["tools"]["a"]["vllm"]["executable"], "serve", setup["model"]["path"],
            "--served-model-name", SERVED_NAME, "--dtype", "float32", "--max-model-len",
            "640", "--no-enable-prefix-caching", "--host", "127.0.0.1", "--port", "8199",
            *EAGER]
    scratch = setup["tmp"] / "single"
    scratch.mkdir(exist_ok=True)
    env = {"VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": host.cpus or "auto", "HF_HUB_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1", "TMPDIR": str(scratch),
           # Host A's cache, which its rank has already filled: a warm start.
           "VLLM_CACHE_ROOT": f"{servers._cache_root(host)}/vllm"}
    host.spawn(servers._private_shm(host, argv), role="vllm-single", key="vllm-single",
               log_path=setup["tmp"] / "single.log", env=env, extra={"group": True})
    try:
        url = "http://127.0.0.1:8199"
        with host.entered():
            deadline = time.monotonic() + 300
            while not lifecycle.healthy(url):
                assert time.monotonic() < deadline, (setup["tmp"] / "single.log").read_text()
                time.sleep(1)
            reply = api.run_concurrent(url, [ids], n_predict, 120)[0]
        return [t["token_id"] for t in reply.tokens]
    finally:
        procs.stop("vllm-single")


NARROW_GBIT = 0.05


@contextlib.contextmanager
def narrowed(link) -> Iterator[None]:
    """The link's both directions held to NARROW_GBIT by the lab's own shaper (tbf, its
    bucket as the lab sizes it) while the launch runs on it, then unshaped again: the
    same servers on a narrower wire, one vLLM start fewer than a second link."""
    burst = str(lab.tbf_burst_bytes(NARROW_GBIT))
    ends = ((link.host_a.netns, link.interface_a), (link.host_b.netns, link.interface_b))
    for ns, ifname in ends:
        subprocess.run(["tc", "-n", ns, "qdisc", "replace", "dev", ifname, "root", "tbf",
                        "rate", f"{NARROW_GBIT * 1000:.0f}mbit", "burst", burst,
                        "latency", "20ms"], check=True)
    try:
        yield
    finally:
        for ns, ifname in ends:
            subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", ifname, "root"],
                           check=True)


@pytest.fixture(scope="module")
def tp_plain(setup):
    """vLLM TP=2 on the unshaped link, asked a 32-token prompt and a 512-token one, and
    the 512-token one again with the link narrowed: the figures the other splits and
    links are compared with (a fixture, so that every test runs alone and in any order)."""
    link, server = launch(setup, {"tensor_parallel": 2})
    reply, row, traffic = ask(link, server, 32)
    _, long_row, _ = ask(link, server, 512, n_predict=8, nonce=4)
    with narrowed(link):
        _, narrow_row, narrow_traffic = ask(link, server, 512, n_predict=8, nonce=5)
    return {"record": server.record, "reply": reply, "row": row, "traffic": traffic,
            "tokens": [t["token_id"] for t in reply.tokens], "prompt": reply.prompt_ids,
            "long_ttft": long_row["ttft_ms"], "narrow_row": narrow_row,
            "narrow_traffic": narrow_traffic}


def test_tp2_splits_every_layer_over_the_link_and_its_figures_agree_with_the_server(
        tp_plain):
    record, reply, row, traffic = (tp_plain[k] for k in ("record", "reply", "row", "traffic"))
    assert record["link_connections"] > 0  # every one between the link's addresses
    assert record["parallel"] == "tp2"
    assert row["status"] == "ok", row
    assert row["generated_tokens"] == 32 and row["prompt_tokens"] == 32
    assert reply.arrival_clock == "segment"  # each event's own arrival
    assert row["cache_n"] == 0
    # The harness's decode agrees with vLLM's own mean inter-token latency.
    gap = abs(row["decode_ms_per_token"] / row["server_decode_ms_per_token"] - 1)
    assert gap < 0.1, (row["decode_ms_per_token"], row["server_decode_ms_per_token"])
    # The server's TTFT lies inside the client's.
    assert row["server_ttft_ms"] <= row["ttft_ms"] + 0.5
    # Tensor parallel: each token's activations cross the link both ways, every layer.
    assert traffic["rpc_bytes_per_token_a_to_b"] > 1000, traffic
    assert traffic["rpc_bytes_per_token_b_to_a"] > 1000, traffic


def test_host_b_dying_mid_request_is_a_crash_and_stops_cleanly(setup, tp_plain):
    """(Right after the TP=2 test: in file order the fixture's launch is still the
    current one and is reused, one vLLM start fewer.)"""
    link, server = launch(setup, {"tensor_parallel": 2})
    rank1 = procs.find(server.record["proc_keys"][1])

    def kill_b() -> None:
        os.killpg(rank1["pid"], signal.SIGKILL)

    with link.host_a.entered():
        ids = prompt(api.token_pool(server.url), 32, 9)
        reply = api.run_concurrent(server.url, [ids], 500, 120, kill_b)[0]
    alive = server.alive() and lifecycle.healthy(server.url)
    row = api.request_row(reply, 32, 500, alive, 1.0)
    assert 0 < row["generated_tokens"] < 500, (reply.http_status, reply.error_text)
    assert row["status"] == "crash", (row["status"], reply.error_type, reply.error_text)
    lifecycle.stop("vx")
    assert not ours_running(setup["tmp"])


def test_a_shaped_link_costs_tp2_its_bytes(tp_plain):
    """At 0.05 Gbit/s the 512-token prompt's activations take longer to cross: the time
    to first token grows by at least a third of what its bytes need on that link."""
    row, traffic = tp_plain["narrow_row"], tp_plain["narrow_traffic"]
    assert row["status"] == "ok", row
    prefill_bytes = traffic["rpc_prefill_a_to_b_bytes"] + traffic["rpc_prefill_b_to_a_bytes"]
    wire_ms = prefill_bytes * 8 / 0.05e9 * 1000 / 2  # both ways at once, each at 0.05
    assert row["ttft_ms"] - tp_plain["long_ttft"] > wire_ms / 3, (
        row["ttft_ms"], tp_plain["long_ttft"], wire_ms, prefill_bytes)


def test_pp2_puts_half_the_layers_on_each_host_and_both_splits_decode_alike(setup, tp_plain):
    link, server = launch(setup, {"pipeline_parallel": 2})
    assert server.record["parallel"] == "pp2"
    reply, row, traffic = ask(link, server, 32)
    assert row["status"] == "ok", row
    # Pipeline parallel: one hidden state forward per token, the sampled token back.
    assert traffic["rpc_bytes_per_token_a_to_b"] > 128, traffic
    assert reply.prompt_ids == tp_plain["prompt"]  # one tokenizer, one nonce
    # float32: the split does not change the greedy output.
    assert [t["token_id"] for t in reply.tokens] == tp_plain["tokens"]


def test_the_split_output_equals_a_single_host_servers(setup, tp_plain):
    link = lab.ensure_link(plan.link_slice(parsed(config({"tensor_parallel": 2})), "vx", "plain"))
    lifecycle.stop("vx")  # the single server gets host A's memory
    assert single_host_tokens(setup, link, tp_plain["prompt"], 32) == tp_plain["tokens"]


def test_a_worker_that_cannot_start_fails_the_launch_at_once(setup, tmp_path):
    broken = {"b": {"vllm": {**setup["tools"]["b"]["vllm"],
                             "executable": str(tmp_path / "no-vllm-here")}}}
    started = time.monotonic()
    with pytest.raises(servers.LaunchError, match="rank 1 on host B .* during start-up"):
        launch(setup, {"tensor_parallel": 2}, **broken)
    assert time.monotonic() - started < 60
    assert not ours_running(setup["tmp"]) and lifecycle.current("vx") is None


def test_a_worker_that_never_joins_fails_the_launch_within_its_deadline(setup, tmp_path):
    """Rank 0 alone waits forever by itself: splitbench's deadline ends it."""
    silent = tmp_path / "silent-vllm"
    silent.write_text("#!/bin/sh\nexec sleep 600\n")
    silent.chmod(0o755)
    cfg = config({"tensor_parallel": 2})
    cfg["models"]["m"]["vllm"]["launch_timeout_s"] = 10
    link = lab.ensure_link(plan.link_slice(parsed(cfg), "vx", "plain"))
    tools = {**setup["tools"], "b": {"vllm": {**setup["tools"]["b"]["vllm"],
                                              "executable": str(silent)}}}
    started = time.monotonic()
    with pytest.raises(servers.LaunchError, match="not healthy after 10 s"):
        servers.ensure(link, plan.server_slice(parsed(cfg), "m"), setup["model"]["path"],
                       setup["model"]["sha256"], tools)
    assert time.monotonic() - started < 10 + 40  # the deadline, and stopping
    assert not ours_running(setup["tmp"]) and lifecycle.current("vx") is None
