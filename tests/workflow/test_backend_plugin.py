"""A backend from outside the package: tests/backends/onetrip is one folder, registered by
naming it in SPLITBENCH_BACKENDS, and a model with `backend: onetrip` runs through the
whole workflow with no file of splitbench's changed. Each token it decodes costs one
round trip to host B, so the link's added delay shows in decode exactly."""

from __future__ import annotations

import os
import subprocess

import pandas as pd
import pytest

from tests.conftest import ROOT, needs_root
from tests.workflow_run import NO_SOCKPERF, SNAKEMAKE, workflow_copy

FOLDER = ROOT / "tests/backends/onetrip"
DELAY_MS = 1.0  # the slow link's one-way delay: a token's round trip gains 2 ms


def config() -> dict:
    return {
        "measurement_version": 1, "toolchain": {"source": "pip"},
        "pairs": {"p": {"mode": "embedded", "hosts": {"a": {}, "b": {}},
                        "links": {"plain": {}, "slow": {"delay_ms": DELAY_MS}}}},
        "baseline_link": "plain",
        "models": {"toy": {"backend": "onetrip", "synthetic": {
            "n_layer": 1, "n_embd": 64, "n_head": 4, "n_head_kv": 2, "n_ff": 128,
            "n_vocab": 1024, "context_length": 2048, "seed": 1}}},
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
    assert added == ["tests/backends/onetrip/__init__.py",
                     "tests/backends/onetrip/api.py",
                     "tests/backends/onetrip/backend.py",
                     "tests/backends/onetrip/server.py"]
    # and it reuses no module of another backend: only the shared seam and client
    for path in FOLDER.rglob("*.py"):
        assert "splitbench.backends.llamacpp" not in path.read_text(), path
        assert "splitbench.backends.vllm" not in path.read_text(), path
    named = subprocess.run(["grep", "-rl", "onetrip", "splitbench", "rules", "Snakefile",
                            "config", "profiles", "envs"],
                           cwd=ROOT, capture_output=True, text=True)
    assert named.stdout == "", named.stdout


def test_an_unregistered_backend_is_refused_by_its_key_before_anything_starts(tmp_path):
    work = workflow_copy(tmp_path, config())
    refused = run(work, "all", registered=False)
    assert refused.returncode != 0
    out = refused.stdout + refused.stderr
    assert "models.toy.backend" in out and "no backend 'onetrip'" in out, out[-2000:]
    assert "SPLITBENCH_BACKENDS" in out
    assert not (work / "results").exists()
    # The backend's own check of its model section runs in the same preflight.
    bad = config()
    bad["models"]["toy"]["layers_on_b"] = 1
    (tmp_path / "bad").mkdir()
    work = workflow_copy(tmp_path / "bad", bad)
    refused = run(work, "-n", "all")
    assert refused.returncode != 0
    assert "models.toy.layers_on_b" in refused.stdout + refused.stderr


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
    # Its traffic hook counted its own connection: 8 bytes each way per token.
    for way in ("a_to_b", "b_to_a"):
        per_token = summary[f"rpc_bytes_per_token_{way}"]
        assert ((per_token / 8 - 1).abs() < 0.01).all(), summary.filter(like="rpc_")
    # One round trip a token: the slow link costs decode two of its one-way delays.
    cost = summary.loc["slow", "decode_ms_per_token"] - summary.loc["plain",
                                                                   "decode_ms_per_token"]
    assert abs(cost / (2 * DELAY_MS) - 1) < 0.2, cost
    # The report carries it, with no prediction made for a split it does not model.
    traffic = (work / "results/tables/link_traffic.md").read_text()
    assert "backend onetrip: one round trip a token" in traffic
    assert "no prediction for backend onetrip" in traffic
    assert (work / "results/report.html").exists()
