"""What test_vllm.py drives vLLM with: the model's shape, the launch's config, one
request and the traffic it makes, a link held narrow for a while; and, run as

    python -m tests.support.vllm_pair SPEC CONFIG OUT NETNS_B

host A's side of the TP=2 launch over SSH (run inside host A's namespace): the launch,
the requests test_vllm.py reads, host B's worker killed mid-request, the stop; it prints
`RESULT {json}` with what it saw."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from splitbench import backends, pairs
from splitbench.backends import lifecycle
from splitbench.backends.prompts import prompt
from splitbench.backends.vllm import api, hf_model, servers, toolchain
from splitbench.configuration import parsed
from splitbench.infra import procs, remote_pids, teardown, telemetry
from splitbench.infra.polling import poll_until
from splitbench.links import lab
from splitbench.matrix import plan

ROOT = Path(__file__).resolve().parents[2]
SHAPE = {"n_layer": 2, "n_embd": 128, "n_head": 4, "n_head_kv": 2, "n_ff": 256,
         "n_vocab": 1024, "context_length": 8192, "seed": 5}
VENV = str(ROOT / ".venv-vllm")

# vLLM's graph compilation is left out of the TP launches (about 34 s of every start on
# 2 cores): what these tests prove is how the model is split, what crosses the link, and
# how launches start, fail and stop, all the same in eager mode. PP=2 runs compiled: in
# eager mode this vLLM's second stage fails its first request (an AssertionError in
# Worker_PP1), and so is the suite's one compiled start.
EAGER = ["--enforce-eager"]

NARROW_GBIT = 0.05


def config(split: dict, dtype: str = "float32") -> dict:
    eager = EAGER if "pipeline_parallel" not in split else []
    vllm = {**split, "dtype": dtype, "launch_timeout_s": 300, "extra_args": eager}
    return {"pairs": {"vx": {"mode": "embedded", "hosts": {"a": {}, "b": {}},
                             "links": {"plain": {}}}},
            "models": {"m": {"synthetic": SHAPE, "backend": "vllm", "vllm": vllm}},
            "contexts": {"short": 32, "long": 512}, "concurrency": [1],
            "cell": {"n_predict": 32}, "measurement_version": 1, "baseline_link": "plain",
            "toolchain": {"source": "pip"}}


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


@contextlib.contextmanager
def narrowed(ends: list[tuple[str | None, str]]) -> Iterator[None]:
    """The link's both directions (`ends`: each end's namespace, None for this one, and
    interface) held to NARROW_GBIT by the lab's own shaper (tbf, its bucket as the lab
    sizes it), then unshaped again: the same servers on a narrower wire, one vLLM start
    fewer than a second link."""
    burst = str(lab.tbf_burst_bytes(NARROW_GBIT))

    def tc(ns: str | None, *args: str) -> None:
        subprocess.run(["tc", *(["-n", ns] if ns else []), "qdisc", *args], check=True)

    for ns, ifname in ends:
        tc(ns, "replace", "dev", ifname, "root", "tbf", "rate",
           f"{NARROW_GBIT * 1000:.0f}mbit", "burst", burst, "latency", "20ms")
    try:
        yield
    finally:
        for ns, ifname in ends:
            tc(ns, "del", "dev", ifname, "root")


def _row(reply, row: dict, traffic: dict) -> dict:
    return {"row": row, "traffic": traffic, "arrival_clock": reply.arrival_clock,
            "tokens": [t["token_id"] for t in reply.tokens], "prompt": reply.prompt_ids}


def _b_dies_mid_request(link, server) -> dict:
    """A 500-token request during which host B's worker is killed at the first token,
    as the kernel's out-of-memory killer would (SIGKILL to the largest process, the
    worker, over SSH): its row, and how its tokens fell around the kill. Its rank then
    ends by itself, and its resource tracker removes the semaphore the rank kept in
    /dev/shm (a file no process maps, so not one splitbench could know as the launch's).

    The kill holds by construction, however fast the model decodes: host A's rank (its
    API server, engine and worker: one process group) is frozen at the first token, B's
    worker is killed and seen gone, and only then does A go on. The request cannot end
    before the kill; A's rank finds its peer dead when it resumes."""
    rank0, rank1 = (procs.find(key) for key in server.record["proc_keys"])
    remote = rank1["remote"]
    found = remote_pids.remote_run(remote, ["pgrep", "-s", str(rank1["pid"]), "-f",
                                            "^VLLM::Worker"])
    workers = [int(pid) for pid in (found.stdout.split() if found else [])]
    if not workers:
        raise RuntimeError(f"no vLLM worker in rank 1's session on host B: {found}")
    kill: dict[str, int | bool] = {}

    def kill_b() -> None:
        # Slow for a first-token hook, on purpose: the client's reads wait, and so does
        # everything of A's rank, frozen here.
        os.killpg(rank0["pid"], signal.SIGSTOP)
        try:
            kill["sent_ns"] = time.monotonic_ns()
            remote_pids.remote_run(remote, ["kill", "-KILL", *map(str, workers)])
            kill["gone"] = bool(poll_until(lambda: all(
                remote_pids.start_time(remote, pid) is None for pid in workers), 30, 0.1))
        finally:
            kill["resumed_ns"] = time.monotonic_ns()
            os.killpg(rank0["pid"], signal.SIGCONT)

    ids = prompt(api.token_pool(server.url), 32, 9)
    reply = api.run_concurrent(server.url, [ids], 500, 120, kill_b)[0]
    alive = server.alive() and lifecycle.healthy(server.url)
    arrivals = [t["t_mono_ns"] for t in reply.tokens]
    sent, resumed = kill.get("sent_ns", 0), kill.get("resumed_ns", 0)
    return {"row": api.request_row(reply, 32, 500, alive, 1.0), "error": reply.error_text,
            "worker_gone": kill.get("gone", False), "kill_s": (resumed - sent) / 1e9,
            "tokens_before_kill": sum(t < sent for t in arrivals),
            # From the kill until A resumed: none, where the freeze held.
            "tokens_during_kill": sum(sent <= t <= resumed for t in arrivals),
            "tokens_after_resume": sum(t > resumed for t in arrivals)}


def over_ssh(spec: dict, cfg: dict, out: Path, netns_b: str) -> dict:
    """Host A's side of a TP=2 launch whose rank 1 starts on host B through its sshd
    (`netns_b`: B's namespace, where the narrowed link's other end is shaped)."""
    result: dict = {}
    link = None
    try:
        link = pairs.ensure_link(spec)
        # Another program's file on B with a vLLM-like name (and a space): never removed.
        link.host_b.run(["sh", "-c", 'echo x > "/dev/shm/psm_other results"'])
        tools = toolchain.record(spec["pair"], spec["hosts"], VENV, out / "tools.json")
        result["tools"] = tools["status"]
        hf_model.write_synthetic_hf(SHAPE, out / "m.hf")
        model = backends.describe_model({"synthetic": SHAPE, "backend": "vllm"}, out / "m.hf")
        server = servers.ensure(link, plan.server_slice(parsed(cfg), "m"), model["path"],
                                model["sha256"], tools)
        rank1 = procs.find(server.record["proc_keys"][1])
        result.update(record={k: server.record[k] for k in ("link_connections", "parallel",
                                                             "cleanup")},
                      rank1_remote=bool(rank1.get("remote")), rank1_host=rank1.get("host"))
        result["short"] = _row(*ask(link, server, 32))
        result["long"] = _row(*ask(link, server, 512, n_predict=8, nonce=4))
        with narrowed([(None, spec["interface_a"]), (netns_b, spec["interface_b"])]):
            result["narrow"] = _row(*ask(link, server, 512, n_predict=8, nonce=5))
        result["b_died"] = _b_dies_mid_request(link, server)
    finally:
        lifecycle.stop(spec["pair"])
        teardown.teardown()
    # Teardown took A's address off the link, and this lab reaches B's sshd over that
    # link: put it back to look, then take it off again.
    link = pairs.ensure_link(spec)
    result["shm_left_b"] = link.host_b.run(["ls", "-A", "/dev/shm"]).stdout.splitlines()
    teardown.teardown()
    return result


if __name__ == "__main__":
    spec, cfg = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    result = over_ssh(spec, cfg, Path(sys.argv[3]), sys.argv[4])
    # A row's figures may be numpy scalars: as plain numbers.
    print("RESULT " + json.dumps(result, default=lambda v: v.item()), flush=True)
