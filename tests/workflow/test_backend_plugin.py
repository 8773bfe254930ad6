"""A backend from outside the package: tests/backends/onetrip is one folder, registered by
naming it in SPLITBENCH_BACKENDS, and a model with `backend: onetrip` runs through the
whole workflow with no file of splitbench's changed: its own config section
(`models.<m>.onetrip`), toolchain record (a script it runs on each host), model format
(a vocabulary directory) and process roles. Each token it decodes costs one round trip
to host B, so the link's added delay shows in decode exactly."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pandas as pd
import pytest

from tests.conftest import ROOT, needs_root
from tests.support.workflow_run import NO_SOCKPERF, SNAKEMAKE, workflow_copy

FOLDER = ROOT / "tests/backends/onetrip"
DELAY_MS = 1.0  # the slow link's one-way delay: a token's round trip gains 2 ms
TOKEN_BYTES = 24  # its own section's key: what each decoded token sends B and gets back


def config() -> dict:
    return {
        "measurement_version": 1, "toolchain": {"source": "pip"},
        "pairs": {"p": {"mode": "embedded", "hosts": {"a": {}, "b": {}},
                        "links": {"plain": {}, "slow": {"delay_ms": DELAY_MS}}}},
        "baseline_link": "plain",
        "models": {"toy": {"backend": "onetrip", "synthetic": {
            "n_layer": 1, "n_embd": 64, "n_head": 4, "n_head_kv": 2, "n_ff": 128,
            "n_vocab": 1024, "context_length": 2048, "seed": 1},
            "onetrip": {"token_bytes": TOKEN_BYTES}}},
        "contexts": {"short": 32}, "concurrency": [1],
        "cell": {"n_predict": 64, "single_stream_requests": 3, "single_stream_seconds": 0},
        "link_check": {"iperf_seconds": 1, "rr_sizes": [64, 16384], "rr_samples": 40,
                       **NO_SOCKPERF},
    }


def run(work, *args: str, registered: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SPLITBENCH_BACKENDS"}
    if registered:
        env["SPLITBENCH_BACKENDS"] = str(FOLDER)
    return subprocess.run([SNAKEMAKE, "--cores", "1", *args], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_backend_is_one_folder_that_the_package_never_names():
    """What plugging it in took: these files, all in its folder; splitbench's own code,
    rules and config name no such backend (the docs point to it as the example)."""
    added = sorted(p.relative_to(ROOT).as_posix() for p in FOLDER.rglob("*.py"))
    assert added == [f"tests/backends/onetrip/{name}.py" for name in (
        "__init__", "api", "backend", "section", "server", "toolchain", "vocabulary")]
    # and it reuses no module of another backend: only the shared seam and client
    for path in FOLDER.rglob("*.py"):
        assert "splitbench.backends.llamacpp" not in path.read_text(), path
        assert "splitbench.backends.vllm" not in path.read_text(), path
    named = subprocess.run(["grep", "-rl", "onetrip", "splitbench", "rules", "Snakefile",
                            "config", "profiles", "envs"],
                           cwd=ROOT, capture_output=True, text=True)
    assert named.stdout == "", named.stdout


@pytest.mark.slow  # snakemake and the CLI, 7 s: the fast tier must stay under 2 minutes
def test_an_unregistered_backend_is_refused_by_its_key_before_anything_starts(tmp_path):
    work = workflow_copy(tmp_path, config())
    refused = run(work, "all", registered=False)
    assert refused.returncode != 0
    out = refused.stdout + refused.stderr
    assert "models.toy.backend" in out and "no backend 'onetrip'" in out, out[-2000:]
    assert "SPLITBENCH_BACKENDS" in out
    assert not (work / "results").exists()
    # Its own section is read by its own keys, and another backend's keys are refused,
    # in the same preflight.
    for name, mistake, said in [
            ("own", {"onetrip": {"token_bytes": 0}}, "models.toy.onetrip.token_bytes"),
            ("other", {"layers_on_b": 1}, "models.toy.layers_on_b': a key of backend "
                                          "llamacpp; this model's backend is onetrip"),
            ("vllm", {"vllm": {}}, "models.toy.vllm': backend vllm's section")]:
        bad = config()
        bad["models"]["toy"].update(mistake)
        (tmp_path / name).mkdir()
        work = workflow_copy(tmp_path / name, bad)
        refused = run(work, "-n", "all")
        assert refused.returncode != 0
        assert said in refused.stdout + refused.stderr, (refused.stdout + refused.stderr)[-2000:]


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_registered_backend_runs_its_cells_through_the_workflow(tmp_path):
    work = workflow_copy(tmp_path, config())
    done = run(work, "all")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    summary = pd.read_parquet(work / "results/summary/cells.parquet").set_index("link")
    assert (summary["status"] == "ok").all(), summary[["status", "flags"]]
    assert set(summary["backend"]) == {"onetrip"}
    assert set(summary["split"]) == {"one round trip a token"}
    # Its traffic hook counted its own connection: its section's bytes each way a token.
    for way in ("a_to_b", "b_to_a"):
        per_token = summary[f"rpc_bytes_per_token_{way}"]
        assert ((per_token / TOKEN_BYTES - 1).abs() < 0.01).all(), summary.filter(like="rpc_")
    # Its own toolchain record (its script, run on each host) and model format.
    tools = json.loads((work / "results/toolchain/p.onetrip.json").read_text())
    assert tools["status"] == "ok" and tools["backend"] == "onetrip"
    served = hashlib.sha256((FOLDER / "server.py").read_bytes()).hexdigest()
    assert tools["a"]["server_sha256"] == tools["b"]["server_sha256"] == served
    assert not (work / "results/toolchain/p.json").exists()  # no llama.cpp build asked for
    vocabulary = json.loads((work / "results/models/toy.onetrip/vocabulary.json").read_text())
    model = json.loads((work / "results/models/toy.json").read_text())
    assert model["header"] == {"format": "onetrip", "n_vocab": 1024} == {
        "format": "onetrip", "n_vocab": len(vocabulary)}
    assert not list((work / "results/models").glob("*.gguf"))
    launch = json.loads((work / "results/servers/p/plain/toy.json").read_text())
    assert launch["toolchain"] == tools
    assert launch["settings"]["onetrip"] == {"token_bytes": TOKEN_BYTES}
    # One round trip a token: the slow link costs decode two of its one-way delays.
    cost = summary.loc["slow", "decode_ms_per_token"] - summary.loc["plain",
                                                                   "decode_ms_per_token"]
    assert abs(cost / (2 * DELAY_MS) - 1) < 0.2, cost
    # The report carries it, with no prediction made for a split it does not model.
    traffic = (work / "results/tables/link_traffic.md").read_text()
    assert "backend onetrip: one round trip a token" in traffic
    assert "no prediction for backend onetrip" in traffic
    assert (work / "results/report.html").exists()
