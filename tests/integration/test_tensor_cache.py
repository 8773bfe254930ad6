"""Weights sent to host B once: real ggml-rpc-server workers with their tensor cache, on
the lab's link, loaded by a real llama-server; the bytes each launch sent are the
kernel's counters of its connections."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from splitbench import pairs
from splitbench.backends.llamacpp import gguf_model, servers, tensor_cache, toolchain
from splitbench.infra import procs
from tests.conftest import needs_root

# The output layer and one block on B (layers_on_b counts the output layer first): the
# block's three feed-forward matrices (6,144 x 1,024 half floats, 12.6 MB each) are
# above ggml's 10 MiB hash threshold; its attention matrices (2.1 MB) are not.
BIG = {"n_layer": 2, "n_embd": 1024, "n_head": 8, "n_head_kv": 8, "n_ff": 6144,
       "n_vocab": 1024, "context_length": 4096, "seed": 5}
SETTINGS = {"layers_on_b": 2, "threads": 1, "slots": 1, "ctx_per_slot": 1024, "n_ctx": 1024}
LINK = {"pair": "tc", "link": "plain", "index": 1, "mode": "embedded"}
FFN_BYTES = 3 * 6144 * 1024 * 2


def big_model_on_the_lab(tmp_path, monkeypatch) -> tuple:
    """The lab's link, BIG written as a GGUF and the pip build's toolchain record, with
    the tensor cache in the test's own cache home."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache-home"))
    gguf = tmp_path / "big.gguf"
    gguf_model.write_synthetic(BIG, gguf)
    tools = toolchain.record("tc", "pip", {"a": {}, "b": {}}, tmp_path / "toolchain.json")
    return pairs.ensure_link(LINK), gguf, tools


def launch(link, gguf, tools, threads: int):
    model = gguf_model.describe({"synthetic": BIG}, gguf)
    return servers.ensure(link, {**SETTINGS, "threads": threads}, str(gguf),
                          model["sha256"], tools).record


@needs_root()
@pytest.mark.slow  # two real launches, 5 s: the fast tier must stay under 2 minutes
@pytest.mark.timeout(300)
def test_a_second_launch_sends_only_what_b_does_not_keep(state_dir, tmp_path, monkeypatch):
    link, gguf, tools = big_model_on_the_lab(tmp_path, monkeypatch)

    first = launch(link, gguf, tools, threads=1)
    directory = str(tmp_path / "cache-home/splitbench/rpc-tensors")
    assert first["tensor_cache"]["dir"] == f"{directory}/tc"  # the pair's folder
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(f"{directory}/tc").st_mode) == 0o700
    assert "--cache" in first["commands"]["rpc_servers"][0]
    kept = sorted((tmp_path / "cache-home/splitbench/rpc-tensors/tc/rpc").iterdir())
    assert len(kept) == 3 and all(p.stat().st_size == FFN_BYTES // 3 for p in kept)
    assert first["load_bytes"]["a_to_b"] > FFN_BYTES

    # Another launch (other settings: a new fingerprint) sends the three hashes instead.
    second = launch(link, gguf, tools, threads=2)
    assert second["launch_id"] != first["launch_id"]
    saved = first["load_bytes"]["a_to_b"] - second["load_bytes"]["a_to_b"]
    assert FFN_BYTES * 0.99 < saved < FFN_BYTES * 1.01, (first["load_bytes"],
                                                          second["load_bytes"])

    # Other weights (another seed) are other hashes: sent, and kept beside the first.
    other = tmp_path / "other.gguf"
    gguf_model.write_synthetic({**BIG, "seed": 6}, other)
    third = servers.ensure(link, SETTINGS, str(other),
                           gguf_model.describe({"synthetic": {**BIG, "seed": 6}}, other)["sha256"],
                           tools).record
    assert third["load_bytes"]["a_to_b"] > FFN_BYTES
    assert len(list((tmp_path / "cache-home/splitbench/rpc-tensors/tc/rpc").iterdir())) == 6

    print("B received while loading:", *(
        f"{r['load_bytes']['a_to_b']:,} B in {r['load_s']} s "
        f"({r['load_bytes']['a_to_b_resent']:,} B sent again)"
        for r in (first, second, third)), sep="\n  ")
    # `teardown --purge` stops the launch and removes the directory, and its record.
    for key in third["proc_keys"]:
        procs.stop(key)
    said = tensor_cache.purge()
    assert said == [f"removed the tensor cache {directory} on host b"]
    assert not os.path.exists(directory)
    assert tensor_cache.purge() == []


@needs_root()
def test_a_directory_another_user_could_have_made_is_refused(tmp_path, monkeypatch, state_dir):
    """A cache directory that is a link (to another user's files, or anywhere) is not
    used: the launch runs without a cache and says why."""
    from splitbench.infra.hosts import Host

    home = tmp_path / "cache-home"
    (home / "splitbench").mkdir(parents=True)
    (home / "splitbench/rpc-tensors").symlink_to(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    worker = toolchain.pip_bin_dir() / "ggml-rpc-server"
    said = tensor_cache.prepare(Host("b"), worker, None, "lab")
    assert said.get("dir") is None and "no private directory" in said["why_not"]
    (home / "splitbench/rpc-tensors").unlink()
    made = tensor_cache.prepare(Host("b"), worker, None, "lab")
    assert made["dir"] == str(home / "splitbench/rpc-tensors/lab")
    assert made["env"] == {"LLAMA_CACHE": f"{made['dir']}/"}


@needs_root()
def test_pairs_side_by_side_keep_their_tensors_apart(tmp_path, monkeypatch, state_dir):
    """Two pairs on one machine (one home): each worker writes and reads its own
    pair's folder, so none reads a file another is still writing, and a failed launch's
    clean-up removes its own pair's files alone."""
    from splitbench.infra.hosts import Host

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    worker = toolchain.pip_bin_dir() / "ggml-rpc-server"
    one, two = (tensor_cache.prepare(Host("b"), worker, None, pair) for pair in ("p1", "p2"))
    assert one["dir"] != two["dir"] and Path(one["dir"]).parent == Path(two["dir"]).parent
    for cache in (one, two):
        (Path(cache["dir"]) / "rpc").mkdir()
        (Path(cache["dir"]) / "rpc/0123abcd").write_bytes(b"w" * 64)
    tensor_cache.discard(Host("b"), one)
    assert not (Path(one["dir"]) / "rpc").exists()
    assert (Path(two["dir"]) / "rpc/0123abcd").read_bytes() == b"w" * 64


def completion(link, url: str) -> tuple[str, list[float]]:
    """A greedy completion's text and each token's log probability: a launch whose
    B-side weights differ (a file cut short) answers otherwise."""
    import httpx

    body = {"prompt": [3, 4, 5, 6, 7, 8], "n_predict": 8, "temperature": 0,
            "ignore_eos": True, "cache_prompt": False, "n_probs": 1}
    with link.host_a.entered():
        said = httpx.post(f"{url}/completion", json=body, timeout=60).json()
    steps = said["completion_probabilities"]
    return said["content"], [step["logprob"] for step in steps]


@needs_root()
@pytest.mark.slow  # three real launches and a kill mid-load: about 15 s
@pytest.mark.timeout(300)
def test_a_worker_killed_mid_load_leaves_nothing_the_next_launch_loads(
        state_dir, tmp_path, monkeypatch):
    """The worker is killed (kill -9) while it writes B's cached tensors, and nothing of
    the launch is left to clean up (its Python process died too: discard never runs).
    The next launch finds the marker, wipes the folder, sends every tensor again, and
    answers as a launch on a clean cache did."""
    import os
    import shutil
    import signal
    import threading
    import time

    link, gguf, tools = big_model_on_the_lab(tmp_path, monkeypatch)
    clean = launch(link, gguf, tools, threads=1)
    rpc = Path(clean["tensor_cache"]["dir"]) / "rpc"
    expected = completion(link, clean["url"])
    assert not (rpc.parent / tensor_cache.MARKER).exists()  # it served: no marker
    for key in clean["proc_keys"]:
        procs.stop(key)
    shutil.rmtree(rpc)  # nothing cached: the next launch writes every file

    monkeypatch.setattr(tensor_cache, "discard", lambda host, cache: None)
    failed: list[BaseException] = []
    cut = threading.Thread(target=lambda: failed.extend(
        _raised(lambda: launch(link, gguf, tools, threads=2))))
    cut.start()
    deadline = time.monotonic() + 60
    while not (rpc.exists() and any(rpc.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.005)
    worker = next(p for p in procs.all_procs() if p["role"] == "rpc-server")
    os.kill(worker["pid"], signal.SIGKILL)
    cut.join(120)
    assert failed, "the launch whose worker was killed did not fail"
    assert (rpc.parent / tensor_cache.MARKER).exists()  # left behind, as after a crash

    after = launch(link, gguf, tools, threads=3)
    assert after["tensor_cache"]["wiped"].startswith("an earlier launch never finished")
    assert after["load_bytes"]["a_to_b"] > FFN_BYTES  # every tensor sent again
    assert sorted(p.stat().st_size for p in rpc.iterdir()) == [FFN_BYTES // 3] * 3
    text, probs = completion(link, after["url"])
    assert text == expected[0]
    assert probs == pytest.approx(expected[1], rel=1e-3)
    assert not (rpc.parent / tensor_cache.MARKER).exists()

    # What the marker prevents: a file cut short with no marker beside it (the worker
    # checks nothing) loads, and the launch answers otherwise.
    for key in after["proc_keys"]:
        procs.stop(key)
    cut_file = sorted(rpc.iterdir())[0]
    cut_file.write_bytes(cut_file.read_bytes()[:FFN_BYTES // 6])
    unchecked = launch(link, gguf, tools, threads=4)
    assert "wiped" not in unchecked["tensor_cache"]
    assert completion(link, unchecked["url"])[1] != pytest.approx(expected[1], rel=1e-3)


def _raised(call) -> list[BaseException]:
    try:
        call()
    except Exception as exc:  # noqa: BLE001  (whatever the launch raised is the point)
        return [exc]
    return []
