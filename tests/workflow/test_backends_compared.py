"""The documented backends config through the whole workflow, on a short matrix: one
model shape by llama.cpp RPC and by vLLM TP=2 over the unshaped link, compared in the
report (one vLLM start; vLLM PP=2 and the shaped link are covered by
tests/integration/test_vllm.py); a missing vLLM stops the run before anything starts;
adding a vLLM model plans nothing else."""

from __future__ import annotations

import os

import pandas as pd
import pytest
import yaml

from tests.conftest import ROOT, needs_root
from tests.support import procs_left
from tests.support.workflow_run import NO_SOCKPERF, planned, snakemake, workflow_copy

EXAMPLE = ["--configfile", "config/examples/backends.yaml", "--replace-workflow-config"]
VENV = ROOT / ".venv-vllm"

needs_vllm = pytest.mark.skipif(not (VENV / "bin/vllm").exists(),
                                reason="vLLM not installed (./bootstrap.sh vllm; "
                                       "./bootstrap.sh test installs it)")


def test_a_vllm_model_without_vllm_stops_before_anything_starts(tmp_path):
    work = workflow_copy(tmp_path)  # no .venv-vllm in this copy
    run = snakemake(work, "all", *EXAMPLE)
    assert run.returncode != 0
    out = run.stdout + run.stderr
    assert "use backend vllm" in out and "./bootstrap.sh vllm" in out, out[-2000:]
    assert not (work / "results").exists() and not (work / ".splitbench").exists()


def short_matrix() -> dict:
    """The example's first two splits on its unshaped link at its short context: every
    vLLM start costs 40-100 s on 2 cores, and this needs one (the launch, which the
    model's drift anchors share on the baseline link)."""
    config = yaml.safe_load((ROOT / EXAMPLE[1]).read_text())
    config["models"] = {name: config["models"][name] for name in ("rpc", "tp")}
    config["pairs"]["lab"]["links"] = {"plain": {}}
    config["contexts"] = {"short": config["contexts"]["short"]}
    config["link_check"] = {**config["link_check"], **NO_SOCKPERF}
    # Eager: graph compilation is about 34 s of a start and changes nothing compared
    # here (compiled vLLM is test_vllm.py's PP=2 launch).
    config["models"]["tp"]["vllm"]["extra_args"] = ["--enforce-eager"]
    return config


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    if not (VENV / "bin/vllm").exists():
        pytest.skip("vLLM not installed (./bootstrap.sh vllm)")
    work = workflow_copy(tmp_path_factory.mktemp("backends"))
    (work / ".venv-vllm").symlink_to(VENV)
    (work / EXAMPLE[1]).write_text(yaml.safe_dump(short_matrix(), sort_keys=False))
    run = snakemake(work, "all", *EXAMPLE, timeout=3600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    return work


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(1200)
@needs_vllm
def test_one_shape_split_by_llama_cpp_and_vllm_is_measured_and_compared(finished):
    work = finished
    summary = pd.read_parquet(work / "results/summary/cells.parquet")
    assert len(summary) == 2 * 1 * 1 * 2  # models x links x contexts x levels
    assert (summary["status"] == "ok").all(), summary[["link", "model", "ctx", "status"]]
    assert dict(summary.groupby("model")["split"].first()) == {"rpc": "rpc", "tp": "tp2"}
    assert summary["model_shape"].nunique() == 1  # one shape, two splits
    one = summary[summary["conc"] == 1].set_index("model")
    # The bytes a decoded token moves, from the kernel's counters: llama.cpp sends the
    # logits back (1,024 x 4 B and 8 of protocol), within one token's share of the 31
    # decoded (the next token's logits can cross before the first token's read ends);
    # tensor parallel moves every layer's activations both ways.
    rpc = one.loc["rpc", "rpc_bytes_per_token_b_to_a"]
    assert 4104 * 30 / 31 - 1 <= rpc <= 4104 * 32 / 31 + 1, rpc
    assert one.loc["tp", "rpc_bytes_per_token_a_to_b"] > 1000
    assert one.loc["tp", "rpc_bytes_per_token_b_to_a"] > 1000
    # On a quiet machine no cell is flagged: vLLM's API server, engine and workers are
    # the measurement's own work, not interference (they once flagged every TP cell).
    assert summary["interference"].isna().all(), summary[["model", "conc", "interference"]]
    # The harness's decode agrees with the server's own mean inter-token latency, as in
    # the tiny run (test_workflow.py): per request when alone; under concurrency the
    # cell's median, as a stream's first token can reach the client late and its decode
    # then looks faster (once, vLLM's second stream: first token 117 ms after vLLM's
    # own, the rest caught up, -19% for that request, -0.3% the cell's median).
    for path in (work / "results/cells/lab").rglob("*.requests.parquet"):
        requests = pd.read_parquet(path)
        gap = (requests["decode_ms_per_token"] / requests["server_decode_ms_per_token"] - 1)
        worst = gap.abs().max() if requests["conc"].iloc[0] == 1 else abs(gap.median())
        flagged = summary.set_index(["link", "model", "ctx", "conc"]).loc[
            tuple(requests[["link", "model", "ctx", "conc"]].iloc[0]), "interference"]
        assert worst < 0.05 or pd.notna(flagged), (path, gap.tolist())
    table = (work / "results/tables/backends.md").read_text()
    for split in ("llama.cpp RPC", "vLLM TP=2"):
        assert table.count(f"| {split} |") == 2, split  # each level
    report = (work / "results/report.html").read_text()
    assert "Backends side by side" in report and "vLLM TP=2" in report
    assert (work / "results/charts/backends.png").stat().st_size > 10_000
    assert not procs_left(work)


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(1200)
@needs_vllm
def test_adding_a_vllm_model_plans_only_its_own_jobs(finished):
    work = finished
    config = yaml.safe_load((work / "config/examples/backends.yaml").read_text())
    config["models"]["tp32"] = {"synthetic": config["models"]["tp"]["synthetic"],
                                "backend": "vllm",
                                "vllm": {"tensor_parallel": 2, "dtype": "float32"}}
    (work / "mine.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    jobs = planned(work, yaml.safe_load((work / "config/config.yaml").read_text()),
                   "--configfile", "mine.yaml", "--replace-workflow-config")
    measured = {rule: outputs for rule, outputs in jobs.items()
                if rule in ("cell", "launch", "anchor", "model_own", "link", "toolchain",
                            "toolchain_own")}
    assert measured, jobs
    for rule, outputs in measured.items():
        assert all("/tp32" in o for o in outputs), (rule, outputs)


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
@needs_vllm
def test_vllms_records_hold_the_keys_their_types_declare(finished):
    """vLLM's launch, toolchain and model records, as llama.cpp's (test_workflow.py)."""
    import json

    from splitbench.contracts import records
    from tests.support.workflow_run import undeclared_keys

    written = {"servers/lab/plain/tp.json": records.LaunchRecord,
               "toolchain/lab.vllm.json": records.ToolchainRecord,
               "models/tp.json": records.ModelInfo}
    found = []
    for name, declared in written.items():
        found += undeclared_keys(json.loads((finished / "results" / name).read_text()),
                                 declared, name)
    assert found == []
