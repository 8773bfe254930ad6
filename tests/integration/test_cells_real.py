"""Cell statuses against real llama-server and ggml-rpc-server processes on the lab."""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from pathlib import Path

import httpx
import pandas as pd
import pytest

from splitbench import pairs
from splitbench.backends import lifecycle
from splitbench.backends.llamacpp import gguf_model, servers, toolchain, traffic_model
from splitbench.backends.llamacpp.backend import BACKEND as LLAMACPP
from splitbench.cells import measure
from splitbench.infra import interference, procs, telemetry
from splitbench.summary import cell_summary
from tests.conftest import needs_root, running
from tests.support import cpu_hogs


def llamacpp_with(**methods):
    """llama.cpp's backend with some of its methods replaced: an instance of its own,
    so the shared one is untouched."""
    backend = type(LLAMACPP)()
    for name, method in methods.items():
        setattr(backend, name, method)
    return backend


MODEL = {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_head_kv": 1, "n_ff": 128,
         "n_vocab": 1024, "context_length": 8192, "seed": 5}
# Each RPC reply's length field, before its bytes (ggml's RPC protocol).
RPC_LENGTH_FIELD = 8
SETTINGS = {"layers_on_b": 2, "threads": 1, "slots": 1, "ctx_per_slot": 4096, "n_ctx": 4096}
LINK = {"pair": "st", "link": "plain", "index": 1, "mode": "embedded"}


@pytest.fixture
def bench(state_dir, tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf_model.write_synthetic(MODEL, gguf)
    model = gguf_model.describe({"synthetic": MODEL}, gguf)
    tools = tmp_path / "toolchain.json"
    toolchain.record("st", "pip", {"a": {}, "b": {}}, tools)
    link_result = tmp_path / "link.parquet"
    pd.DataFrame([{"fingerprint": "lab-plain"}]).to_parquet(link_result)

    def run(prompt_tokens: int, n_predict: int, name: str, settings: dict = SETTINGS,
            **extra: int) -> pd.DataFrame:
        cell = {"measurement_version": 1, "prompt_tokens": prompt_tokens, "concurrency": 1,
                "n_predict": n_predict, "request_timeout_s": 60, "crash_below_tps": 1.0,
                **extra}
        return measure.run(cell, LINK, model, {"settings": settings}, str(tools),
                         str(link_result), str(tmp_path / f"{name}.parquet"),
                         str(tmp_path / f"{name}.requests.parquet"))

    return run


@needs_root()
@pytest.mark.slow
def test_prompt_beyond_the_context_is_a_ctx_wall(bench):
    frame = bench(prompt_tokens=4200, n_predict=8, name="wall")
    assert frame["status"].tolist() == ["ctx_wall"]
    assert frame["http_status"].tolist() == [400]
    ok = bench(prompt_tokens=100, n_predict=8, name="fits")
    assert ok["status"].tolist() == ["ok"]
    assert ok["launch_id"].iloc[0] == frame["launch_id"].iloc[0]  # one launch served both


@needs_root()
@pytest.mark.slow
def test_killing_the_worker_mid_cell_is_a_crash_and_the_next_cell_relaunches(bench,
                                                                             monkeypatch):
    first = {}
    decoding = threading.Event()
    first_token = telemetry.RpcTraffic.at_first_token

    def at_first_token(self) -> None:  # the cell's own hook: its first token is in
        first_token(self)
        decoding.set()

    monkeypatch.setattr(telemetry.RpcTraffic, "at_first_token", at_first_token)

    def long_cell() -> None:
        first["frame"] = bench(prompt_tokens=64, n_predict=3900, name="long")

    runner = threading.Thread(target=long_cell)
    runner.start()
    # Wait for the state the test is about: the servers loaded and the cell decoding.
    assert decoding.wait(timeout=300), "the cell never got its first token"
    procs.stop("rpc-st-0")  # the worker dies under the running cell
    runner.join(timeout=120)
    crashed = first["frame"]
    assert crashed["status"].tolist() == ["crash"], crashed[["status", "error_type"]]
    assert crashed["cell_status"].iloc[0] == "crash"
    # It died mid-stream, not while loading: some tokens came, far fewer than asked.
    assert 1 <= crashed["generated_tokens"].iloc[0] < 3900
    assert crashed["error_type"].iloc[0] != "launch_failed"
    after = bench(prompt_tokens=64, n_predict=8, name="after")
    assert after["status"].tolist() == ["ok"]
    assert after["launch_id"].iloc[0] != crashed["launch_id"].iloc[0]
    record = json.loads((procs.state_dir() / "servers" / "st.json").read_text())
    assert record["launch_id"] == after["launch_id"].iloc[0]
    link = pairs.ensure_link(LINK)
    with link.host_a.entered():
        assert lifecycle.healthy(record["url"])


@needs_root()
@pytest.mark.slow
def test_bytes_per_decoded_token_come_from_the_rpc_connection(bench):
    frame = bench(prompt_tokens=200, n_predict=120, name="bytes")
    row = frame.iloc[0]
    assert row["status"] == "ok"
    # Each decode step sends activations to B and gets logits back. What B returns per
    # token, as the product predicts it from where the launch put the layers (the
    # output layer on B's one worker: the logits, n_vocab x 4 B), and each reply's
    # 8-byte length field (ggml's RPC protocol: compare/traffic.py's measured 8 B).
    assert (row["output_on_b"], row["rpc_workers"]) == (True, 1)
    reply = traffic_model.predicted_bytes(row["model_n_embd"], row["model_n_vocab"],
                                    row["blocks_on_b"], row["output_on_b"],
                                    row["rpc_workers"])[1] + RPC_LENGTH_FIELD
    # Counted exactly but for one token: the read at the first token can fall between
    # a token's arrival and its reply's bytes, so the bytes hold one reply more or fewer
    # than the n tokens counted (the first token is prefill's): within 1/n per token.
    n = row["rpc_decode_tokens"]
    assert 100 <= n <= 120 - 1, n  # tokens 2-120 (a read that waited for the CPU: fewer)
    total = row["rpc_decode_b_to_a_bytes"]
    assert (n - 1) * reply <= total <= (n + 1) * reply, (total, n, reply)
    assert row["rpc_bytes_per_token_b_to_a"] == total / n
    assert row["rpc_bytes_per_token_a_to_b"] >= MODEL["n_embd"] * 4
    # Prefill moved every prompt token's hidden state (n_embd x 4 bytes) from A to B.
    assert row["rpc_prefill_a_to_b_bytes"] >= 200 * MODEL["n_embd"] * 4


@needs_root()
@pytest.mark.slow
def test_a_two_way_release_decodes_both_requests_in_one_step_whatever_ran_before(bench):
    """Each 2-way release pays one round trip to B per decode step, not one per token:
    its requests go to slots 0 and 1. Left to llama-server, after slots 1 and 2 served
    last, its least-recently-used choice puts the first release on slots 3 and 0, which
    it decodes in separate steps (each slot its own KV stream; a step batches only
    adjacent ones), and the cell's decode alternated release by release."""
    settings = {**SETTINGS, "slots": 4, "n_ctx": 4 * SETTINGS["ctx_per_slot"]}
    bench(prompt_tokens=64, n_predict=4, name="first", settings=settings)  # slot 0
    record = json.loads((procs.state_dir() / "servers" / "st.json").read_text())
    with pairs.ensure_link(LINK).host_a.entered():
        for slot in (1, 2):  # slots 1 and 2 used last, 3 never: 3 and 0 are the oldest
            reply = httpx.post(f"{record['url']}/completion", timeout=60,
                               json={"prompt": [5] * 16, "n_predict": 4, "id_slot": slot})
            assert reply.json()["id_slot"] == slot
    frame = bench(prompt_tokens=64, n_predict=48, name="pair", settings=settings,
                  concurrency=2, concurrent_releases=4)
    assert (frame["status"] == "ok").all() and frame["launch_id"].nunique() == 1
    turns = frame.groupby("shot")["rpc_turns_per_token"].max()
    # One turn a step for two tokens: 0.5 a token (0.58 in the first release, where A
    # and B size the new two-token graph: a few turns more); a step per slot: 1.0.
    assert len(turns) >= 4 and (turns < 0.75).all(), turns.tolist()


@needs_root()
@pytest.mark.slow
def test_repeats_are_measured_and_their_spread_is_the_uncertainty(bench, state_dir, tmp_path,
                                                                   capsys):
    frame = bench(prompt_tokens=64, n_predict=24, name="cells/st/plain/m/ctxshort_c2",
                  concurrency=2, repeats=3)
    assert sorted(frame["repeat"].unique()) == [0, 1, 2]
    # The job's log shows each release as it ends, labelled by its pair, link, prompt and
    # level (not the model's settings): one per repeat here, each after a warm-up.
    out = capsys.readouterr().out
    assert out.count("st/plain 64 tokens x2: release 1, 2/2 ok, 48 tokens") == 3
    assert out.count("st/plain 64 tokens x2: warm-up release done") == 3
    assert out.index("warm-up release done") < out.index("release 1, 2/2 ok")
    assert len(frame) == 6 and (frame["status"] == "ok").all()
    # The server saw each repeat's warm-up release (two 64-token prompts) besides the
    # measured one; none of the warm-up's is a row.
    logs = "".join(p.read_text() for p in state_dir.rglob("*llama-server.log"))
    assert len(re.findall(r"prompt eval time = .*/ +64 tokens", logs)) == 2 * len(frame)
    tokens = pd.read_parquet(tmp_path / "cells/st/plain/m/ctxshort_c2.parquet")
    assert tokens.groupby(["repeat", "request_id"]).size().eq(24).all()
    # Every row says which cell it is: no reader needs the file's path.
    identity = ["pair", "link", "model", "ctx", "conc"]
    for rows in (frame, tokens):
        assert rows[identity].drop_duplicates().to_numpy().tolist() == [
            ["st", "plain", "m", "short", 2]]
    anywhere = tmp_path / "renamed.parquet"
    shutil.copy(tmp_path / "cells/st/plain/m/ctxshort_c2.requests.parquet", anywhere)
    summary = cell_summary.summarize([str(anywhere)], {"short": 64})
    row = summary.iloc[0]
    assert (row["pair"], row["link"], row["model"], row["ctx"], row["conc"]) == (
        "st", "plain", "m", "short", 2)
    assert row["repeats"] == 3
    assert row["uncertainty_from"] == "repeats"
    spread = frame.groupby("repeat")["decode_ms_per_token"].median().std(ddof=1) / 3 ** 0.5
    assert row["decode_ms_se"] >= spread * 0.999


@needs_root()
@pytest.mark.slow
def test_an_unexpected_failure_in_one_repeat_keeps_the_others(bench, tmp_path, monkeypatch):
    real_run = LLAMACPP.stream
    calls = []

    def fails_on_second_repeat(*args, **kwargs):
        # The measured releases' calls (a repeat's warm-up release first sends one with
        # no first-token callback, and a failure there is not the cell's result).
        if len(args) > 4:
            calls.append(1)
        if len(calls) == 2 and len(args) > 4:
            raise RuntimeError("bug in the harness")
        return real_run(*args, **kwargs)

    monkeypatch.setattr(measure, "backend_of", lambda cell: llamacpp_with(
        stream=fails_on_second_repeat))
    frame = bench(prompt_tokens=64, n_predict=8, name="flaky", repeats=3)
    by_repeat = frame.set_index("repeat")
    assert by_repeat.loc[0, "status"] == "ok" and by_repeat.loc[2, "status"] == "ok"
    assert by_repeat.loc[1, "status"] == "error"
    assert by_repeat.loc[1, "error_type"] == "RuntimeError"
    assert "bug in the harness" in by_repeat.loc[1, "error_text"]
    written = pd.read_parquet(tmp_path / "flaky.requests.parquet")
    assert sorted(written["repeat"]) == [0, 1, 2]


@needs_root()
@pytest.mark.slow
def test_a_cell_whose_every_repeat_fails_in_the_harness_fails_the_job(bench, tmp_path,
                                                                      monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("bug in the harness")

    monkeypatch.setattr(measure, "backend_of",
                        lambda cell: llamacpp_with(stream=broken))
    with pytest.raises(RuntimeError, match=r"(?s)every repeat.*bug in the harness"):
        bench(prompt_tokens=64, n_predict=8, name="broken")
    # Nothing written, so the next run measures the cell again.
    assert not (tmp_path / "broken.requests.parquet").exists()


@needs_root()
@pytest.mark.slow
def test_a_launch_that_fails_on_host_b_is_a_row_stamped_when_it_failed(bench):
    """B's worker really cannot start: its settings name a device B does not have. Every
    request of the cell is a row saying so: the launch failed, on host B, how the
    worker ended and where its log (with its own words) is; stamped when it failed."""
    no_device = {**SETTINGS, "worker_args": ["-d", "NoSuchDevice"]}
    before = time.time_ns()
    frame = bench(prompt_tokens=64, n_predict=8, name="nolaunch", concurrency=2,
                  settings=no_device)
    after = time.time_ns()
    assert frame["error_type"].tolist() == ["launch_failed"] * 2
    assert frame["status"].tolist() == ["load"] * 2
    assert frame["error_text"].nunique() == 1
    text = frame["error_text"].iloc[0]
    link = pairs.ensure_link(LINK)
    said = re.fullmatch(rf"host b: rpc-server exited with code ([1-9]\d*) before it listened "
                        rf"on {re.escape(link.addr_b)}:{link.ports.worker(0)}; its log: (\S+)",
                        text)
    assert said, text
    log = Path(said[2])
    assert "unknown device: NoSuchDevice" in log.read_text(), log.read_text()
    # Stamped when it failed: after the worker wrote its last words (not 1970), before
    # the cell returned.
    assert frame["t_send_ns"].between(max(before, log.stat().st_mtime_ns), after).all()
    assert frame["cell_wall_ms"].isna().all()  # nothing was sent: no wall time
    # Nothing of the launch runs: no worker, and no llama-server was started for it.
    assert procs.find("rpc-st-0") is None and procs.find("llama-st") is None
    assert not lifecycle.current("st")


@needs_root()
@pytest.mark.slow
def test_a_stopped_client_keeps_each_token_s_arrival_against_llama_server(state_dir, tmp_path):
    """The client, stopped from outside for 20-50 ms at a time while it reads a real
    llama-server on host A's loopback, still gives every token its own time, and its
    decode ms/token matches the server's own."""
    from tests.support.starved_reader import run_starved

    gguf = tmp_path / "m.gguf"
    gguf_model.write_synthetic(MODEL, gguf)
    model = gguf_model.describe({"synthetic": MODEL}, gguf)
    tools = toolchain.record("st", "pip", {"a": {}, "b": {}}, tmp_path / "toolchain.json")
    link = pairs.ensure_link(LINK)
    server = servers.ensure(link, SETTINGS, model["path"], model["sha256"], tools)
    started = threading.Event()
    started.set()
    pauses: list[tuple[int, int]] = []
    prompt = json.dumps([[5 + i % 200 for i in range(64)]])
    replies = run_starved([server.url, "1", "400", prompt], started, pauses,
                          prefix=("ip", "netns", "exec", link.host_a.netns))
    reply = replies[0]
    times, timings = reply["times"], reply["final"]["timings"]
    assert reply["clock"] == "segment" and reply["error"] is None
    assert len(times) == 400 and len(set(times)) == 400  # each token its own time
    decode = (times[-1] - times[0]) / (len(times) - 1) / 1e6
    server_decode = timings["predicted_ms"] / (timings["predicted_n"] - 1)
    assert abs(decode / server_decode - 1) < 0.01, (decode, server_decode)
    # The reader really was stopped while tokens came.
    during = sum(any(a <= t <= b for a, b in pauses) for t in times)
    assert len(pauses) >= 4 and during >= 20, (len(pauses), during)


@needs_root()
@pytest.mark.slow
def test_beside_two_busy_loops_the_harness_still_agrees_and_the_cell_is_flagged(
        bench, tmp_path):
    """Two busy loops on a 2-core machine: every token still has its own time, and that
    time follows the server's own stamp for the token; the median request's decode
    agrees with the server's within 5%; the cell says what else used the CPUs, enough for
    the default limits to flag it.

    Why not every request within 5%: llama-server stamps a token when it samples it and
    another of its threads sends it. Beside busy loops that thread waits a few ms now and
    then (up to 5 ms seen here), a delay every client sees. When it falls on the first or
    last of 48 tokens, that request's decode is a true 5-7% off the server's, so per
    request the test checks the stamps token by token instead."""
    with cpu_hogs():
        frame = bench(prompt_tokens=64, n_predict=48, name="busy",
                      single_stream_requests=3)
    assert (frame["status"] == "ok").all(), frame[["status", "error_text"]]
    assert (frame["arrival_clock"] == "segment").all()
    assert (frame["coalesced_tokens"] == 0).all()
    gap = frame["decode_ms_per_token"] / frame["server_decode_ms_per_token"] - 1
    assert abs(gap.median()) < 0.05, gap
    tokens = pd.read_parquet(tmp_path / "busy.parquet")
    for request_id, one in tokens.groupby("request_id"):
        # Each token's arrival less the server's stamp for it, both from the first token.
        arrival_ms = (one["t_ns"] - one["t_ns"].iloc[0]) / 1e6
        stamp_ms = one["server_cum_predicted_ms"] - one["server_cum_predicted_ms"].iloc[0]
        offset = arrival_ms - stamp_ms
        on_time = (offset - offset.median()).abs() < 1.0
        # A reader stamping at its own (starved) reads would put runs of tokens 20+ ms
        # late; the server's late sends are single tokens.
        assert on_time.mean() >= 0.9, (request_id, offset.round(2).tolist())
    assert frame["foreign_cpu_a_cores"].iloc[0] > 0.5, frame["foreign_cpu_a_cores"]
    verdict = interference.flag(frame.iloc[:1], {})
    assert verdict["interference_checked"].iloc[0]
    assert "other processes used" in verdict["interference"].iloc[0]


@needs_root()
@pytest.mark.slow
def test_a_quiet_cell_is_not_flagged(bench):
    """The other side of the busy-loop test: the same cell with nothing beside it. The
    measurement's own processes (server, worker, client) are not counted as other
    work, so the flag stays off and the check that the busy cell is flagged binds."""
    frame = bench(prompt_tokens=64, n_predict=48, name="quiet", single_stream_requests=3)
    assert (frame["status"] == "ok").all(), frame[["status", "error_text"]]
    assert frame["foreign_cpu_a_cores"].iloc[0] < 0.2, frame["foreign_cpu_a_cores"]
    verdict = interference.flag(frame.iloc[:1], {})
    assert verdict["interference_checked"].iloc[0]
    assert pd.isna(verdict["interference"].iloc[0]), verdict["interference"].iloc[0]


@needs_root()
@pytest.mark.slow
def test_a_server_that_dies_loading_says_how_and_leaves_nothing_running(state_dir, tmp_path,
                                                                        monkeypatch):
    """A model that kills llama-server while it loads (here: a GGUF cut in half): the
    launch record names how it ended and the log's last lines, and the worker already
    started for it is stopped at once."""
    gguf = tmp_path / "cut.gguf"
    gguf_model.write_synthetic(MODEL, gguf)
    data = gguf.read_bytes()
    gguf.write_bytes(data[: len(data) // 2])
    model = gguf_model.describe({"synthetic": MODEL}, gguf)
    tools = toolchain.record("st", "pip", {"a": {}, "b": {}}, tmp_path / "toolchain.json")
    pairs.ensure_link(LINK)
    # Every process the launch starts, by its id (another run's are none of this test's).
    started: list[procs.ProcRecord] = []
    spawn = procs.spawn

    def recorded(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 (procs.spawn's)
        started.append(spawn(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(procs, "spawn", recorded)
    record = servers.launch_record(LINK, SETTINGS, model, tools)
    assert record["status"] == "failed"
    assert re.search(r"llama-server (exited with code \d+|killed by SIG\w+) during start-up",
                     record["error"]), record["error"]
    assert "the last lines of its log" in record["error"]
    assert procs.find("rpc-st-0") is None and procs.find("llama-st") is None
    workers = [p for p in started if p["role"] == "rpc-server"]
    assert workers and not [p["pid"] for p in workers if running(p["pid"])]  # none is left
    assert not lifecycle.current("st")


def test_a_long_failure_keeps_its_reason_and_its_log_s_last_lines():
    from splitbench.cells.measure import capped

    text = "llama-server exited with code 1 during start-up\n" + "\n".join(
        f"log line {i}" for i in range(1000))
    kept = capped(text)
    assert len(kept) <= 2000
    assert kept.startswith("llama-server exited with code 1 during start-up\n…\n")
    assert kept.endswith("log line 999")
    assert capped("short") == "short"


@needs_root()
@pytest.mark.slow
def test_a_launch_is_reused_only_while_its_fingerprint_matches(state_dir, tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf_model.write_synthetic(MODEL, gguf)
    model = gguf_model.describe({"synthetic": MODEL}, gguf)
    tools = toolchain.record("st", "pip", {"a": {}, "b": {}}, tmp_path / "toolchain.json")
    link = pairs.ensure_link(LINK)
    first = servers.ensure(link, SETTINGS, str(gguf), model["sha256"], tools)
    processes = [procs.find(key) for key in first.record["proc_keys"]]
    again = servers.ensure(link, SETTINGS, str(gguf), model["sha256"], tools)
    # Same settings, same model, same build, same link: the very same processes.
    assert again.launch_id == first.launch_id
    assert [procs.find(key) for key in again.record["proc_keys"]] == processes
    assert all(procs.is_alive(p) for p in processes)
    changed = servers.ensure(link, {**SETTINGS, "threads": 2}, str(gguf), model["sha256"],
                             tools)
    assert changed.fingerprint != first.fingerprint
    assert changed.launch_id != first.launch_id
    # The old launch was stopped, not left beside the new one.
    assert not any(procs.is_alive(p) for p in processes)
