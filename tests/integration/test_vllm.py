"""The vLLM backend against real vLLM servers: TP=2 with host B's rank started through a
real sshd (host A and host B namespaces of their own, each with its own /dev/shm, as two
machines have), a narrowed link and host B's worker killed mid-request; PP=2 across the lab's
namespaces; greedy output against a single-host server; workers that never come; and
nothing left behind. (TP=2 in the lab, through the workflow: test_backends_compared.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from splitbench import backends
from splitbench.backends import lifecycle
from splitbench.backends.vllm import api, hf_model, servers
from splitbench.backends.vllm import toolchain as vllm_toolchain
from splitbench.backends.vllm.api import SERVED_NAME
from splitbench.backends.vllm.servers import PRIVATE_SHM
from splitbench.backends.vllm.setup import executable
from splitbench.configuration import parsed
from splitbench.infra import procs, ssh, teardown
from splitbench.links import lab
from splitbench.matrix import plan
from tests.conftest import ROOT, needs_root
from tests.support import commands_in, processes
from tests.support.ssh_b import sh, start_sshd
from tests.support.vllm_pair import EAGER, SHAPE, VENV, ask, config

pytestmark = [
    pytest.mark.slow,  # vLLM's two ranks across namespaces, sshd
    pytest.mark.timeout(600),
    needs_root(),
    pytest.mark.skipif(not executable(VENV).exists(),
                       reason="vLLM not installed (./bootstrap.sh vllm; ./bootstrap.sh test "
                              "installs it)"),
]


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
        model = backends.describe_model({"synthetic": SHAPE, "backend": "vllm"}, tmp / "m.hf")
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
    for proc in processes():
        # The module's directory is named vllm0: a link relay started from it is not vLLM.
        own_args = proc.args.replace(str(tmp), "<tmp>").lower()
        if ("vllm serve" in proc.args and str(tmp) in proc.args) or (
                proc.session in SESSIONS and "vllm" in own_args):
            ours.append(f"{proc.pid} {proc.args}")
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


# Host A and host B of the pair over SSH: namespaces of their own joined by a veth, B's
# sshd on its end. Host A is where splitbench runs, so the launch runs in a process inside
# A's namespace: rank 0's rendezvous store, which listens on every address of host A,
# then listens only inside it.
NS_A, NS_B = "sb-vsa", "sb-vsb"
IF_A, IF_B = "sbvs-a", "sbvs-b"
ADDR_A, ADDR_B = "10.214.11.1", "10.214.11.2"


def _pair_over_ssh(tmp: Path) -> dict:
    """Both namespaces, the veth with B's end up, B's sshd: host B's SSH settings."""
    for ns in (NS_A, NS_B):
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        sh("ip", "netns", "add", ns)
        procs.record_namespace(ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "-n", NS_A, "link", "add", IF_A, "type", "veth", "peer", "name", IF_B,
       "netns", NS_B)
    sh("ip", "-n", NS_B, "addr", "add", f"{ADDR_B}/30", "dev", IF_B)
    sh("ip", "-n", NS_B, "link", "set", IF_B, "up")
    return start_sshd(NS_B, ADDR_B, tmp, wrap=PRIVATE_SHM)


@pytest.fixture(scope="module")
def tp2(setup):
    """vLLM TP=2 over SSH, run once by host A's side (tests/support/vllm_pair.py):
    a 32-token prompt, a 512-token one, the 512-token one again with the link narrowed,
    then a request during which host B's worker is killed, and the stop. What it saw, and
    what each host has left running after it (a fixture, so that every test runs alone
    and in any order)."""
    tmp = setup["tmp"] / "ssh"
    tmp.mkdir()
    host_b = {**_pair_over_ssh(tmp), "vllm_venv": VENV}
    spec = {"pair": "sv", "link": "veth", "mode": "ssh", "hosts": {"a": {}, "b": host_b},
            "interface_a": IF_A, "interface_b": IF_B, "addr_a": ADDR_A, "addr_b": ADDR_B,
            "prefix": 30}
    try:
        run = subprocess.run(
            ["ip", "netns", "exec", NS_A, *PRIVATE_SHM, sys.executable, "-m",
             "tests.support.vllm_pair", json.dumps(spec),
             json.dumps(config({"tensor_parallel": 2})), str(tmp), NS_B],
            capture_output=True, text=True, timeout=900, cwd=ROOT,
            env={"SPLITBENCH_STATE": str(tmp / "state-a"), "PATH": "/usr/sbin:/usr/bin:/bin"})
        left = {"a": commands_in(NS_A), "b": commands_in(NS_B)}
    finally:
        ssh.close_all()
        procs.stop("sshd-test")
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, (run.stdout + run.stderr)[-4000:]
    return {**json.loads(lines[-1][7:]), "left": left, "stderr": run.stderr[-3000:]}


def test_tp2_splits_every_layer_over_the_link_and_its_figures_agree_with_the_server(tp2):
    record, row, traffic = tp2["record"], tp2["short"]["row"], tp2["short"]["traffic"]
    assert record["link_connections"] > 0  # every one between the link's addresses
    assert record["parallel"] == "tp2"
    assert row["status"] == "ok", (row, tp2["stderr"])
    assert row["generated_tokens"] == 32 and row["prompt_tokens"] == 32
    assert tp2["short"]["arrival_clock"] == "segment"  # each event's own arrival
    assert row["cache_n"] == 0
    # The harness's decode agrees with vLLM's own mean inter-token latency.
    gap = abs(row["decode_ms_per_token"] / row["server_decode_ms_per_token"] - 1)
    assert gap < 0.1, (row["decode_ms_per_token"], row["server_decode_ms_per_token"])
    # The server's TTFT lies inside the client's.
    assert row["server_ttft_ms"] <= row["ttft_ms"] + 0.5
    # Tensor parallel: each token's activations cross the link both ways, every layer.
    assert traffic["rpc_bytes_per_token_a_to_b"] > 1000, traffic
    assert traffic["rpc_bytes_per_token_b_to_a"] > 1000, traffic


def test_rank_1_starts_through_host_bs_sshd_and_leaves_nothing_on_b(tp2):
    assert tp2["tools"] == "ok", tp2["stderr"]
    assert tp2["rank1_remote"] and tp2["rank1_host"] == "b"  # started through sshd
    # Nothing of the launch is left running: on A nothing at all, on B only its sshd.
    assert tp2["left"]["a"] == [], tp2["left"]
    assert all("sshd" in c for c in tp2["left"]["b"]), tp2["left"]
    # ...nor in B's scratch directory.
    cleanup = tp2["record"]["cleanup"]
    scratch = [p for c in cleanup for p in c["paths"]]
    assert scratch and not any(Path(p).exists() for p in scratch), scratch
    # /dev/shm: host A (not a namespace of the lab here, a host of its own) recorded the
    # files its rank's processes mapped (vLLM's shared-memory broadcast); B's rank, a
    # headless remote rank, maps none. On B nothing of the launch is left, and another
    # program's file is still there.
    mapped_a = [p for c in cleanup if not c["host"].get("ssh") for p in c["shm"]]
    assert mapped_a and all(p.startswith("/dev/shm/psm_") for p in mapped_a), cleanup
    assert tp2["shm_left_b"] == ["psm_other results"], tp2["shm_left_b"]


def test_host_bs_worker_killed_mid_request_is_a_crash(tp2):
    """Host B's worker killed at the first token of a 500-token request, as an
    out-of-memory kill would, while host A's rank is held frozen (and the stop after it
    leaves nothing: the test above)."""
    died = tp2["b_died"]
    row = died["row"]
    # The kill came while the request was open: B's worker was gone before A went on,
    # and no token came from the kill until A resumed (the freeze held).
    assert died["worker_gone"], died
    assert died["tokens_before_kill"] > 0 and died["tokens_during_kill"] == 0, died
    assert 0 < row["generated_tokens"] < 500, died
    assert row["status"] == "crash", died


def test_a_shaped_link_costs_tp2_its_bytes(tp2):
    """At 0.05 Gbit/s the 512-token prompt's activations take longer to cross: the time
    to first token grows by at least a third of what its bytes need on that link."""
    row, traffic = tp2["narrow"]["row"], tp2["narrow"]["traffic"]
    assert row["status"] == "ok", row
    prefill_bytes = traffic["rpc_prefill_a_to_b_bytes"] + traffic["rpc_prefill_b_to_a_bytes"]
    wire_ms = prefill_bytes * 8 / 0.05e9 * 1000 / 2  # both ways at once, each at 0.05
    long_ttft = tp2["long"]["row"]["ttft_ms"]
    assert row["ttft_ms"] - long_ttft > wire_ms / 3, (row["ttft_ms"], long_ttft, wire_ms,
                                                      prefill_bytes)


def test_pp2_puts_half_the_layers_on_each_host_and_both_splits_decode_alike(setup, tp2):
    link, server = launch(setup, {"pipeline_parallel": 2})
    assert server.record["parallel"] == "pp2"
    reply, row, traffic = ask(link, server, 32)
    assert row["status"] == "ok", row
    # Pipeline parallel: one hidden state forward per token, the sampled token back.
    assert traffic["rpc_bytes_per_token_a_to_b"] > 128, traffic
    assert reply.prompt_ids == tp2["short"]["prompt"]  # one tokenizer, one nonce
    # float32: the split does not change the greedy output.
    assert [t["token_id"] for t in reply.tokens] == tp2["short"]["tokens"]


def test_the_split_output_equals_a_single_host_servers(setup, tp2):
    link = lab.ensure_link(plan.link_slice(parsed(config({"tensor_parallel": 2})), "vx", "plain"))
    lifecycle.stop("vx")  # the single server gets host A's memory
    short = tp2["short"]
    assert single_host_tokens(setup, link, short["prompt"], 32) == short["tokens"]


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
    cfg["models"]["m"]["vllm"]["launch_timeout_s"] = 5
    link = lab.ensure_link(plan.link_slice(parsed(cfg), "vx", "plain"))
    tools = {**setup["tools"], "b": {"vllm": {**setup["tools"]["b"]["vllm"],
                                              "executable": str(silent)}}}
    started = time.monotonic()
    with pytest.raises(servers.LaunchError, match="not healthy after 5 s"):
        servers.ensure(link, plan.server_slice(parsed(cfg), "m"), setup["model"]["path"],
                       setup["model"]["sha256"], tools)
    assert time.monotonic() - started < 5 + 40  # the deadline, and stopping
    assert not ours_running(setup["tmp"]) and lifecycle.current("vx") is None
