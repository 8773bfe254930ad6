"""One run in which things fail as they do on users' machines: each failure is a result
in the tables, the rest is measured and reported, and nothing is left running."""

from __future__ import annotations

import copy
import json
import os
import re

import pandas as pd
import pytest

from tests.conftest import needs_root
from tests.support import free_port, namespaces, procs_left
from tests.support.workflow_run import (
    NO_SOCKPERF,
    snakemake,
    tiny,
    workflow_copy,
)

# One run in which things fail as they do on users' machines, read by the tests below:
# pair t's link `slow` and pair u's baseline `plain` are routed around (host A sends B's
# address another way, as a misconfigured machine would); pair far's host B does not
# answer (nothing listens at its SSH port); model cut is a GGUF cut in half, whose
# server dies loading. Each failure is a result in the tables; the rest is measured and
# the report is written; the run exits non-zero naming each.
FAILING_LINKS = {"t": ("slow", "plain"), "u": ("plain", "slow")}  # pair: (fails, works)


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    from splitbench.backends.llamacpp import gguf_model
    from splitbench.configuration import parsed
    from splitbench.infra import teardown
    from splitbench.links import lab
    from splitbench.matrix import plan
    from tests.support.lab import detour

    tmp = tmp_path_factory.mktemp("failures")
    cut = tmp / "cut.gguf"
    gguf_model.write_synthetic(tiny()["models"]["tiny"]["synthetic"], cut)
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    port = free_port()  # a port nothing listens on
    (tmp / "known_hosts").write_text("")
    config = {**tiny(), "contexts": {"short": 32}, "concurrency": [1]}
    config["link_check"] = {**config["link_check"], **NO_SOCKPERF}
    config["models"] = {"tiny": config["models"]["tiny"],
                        "cut": {"path": str(cut), "layers_on_b": 1, "threads": 1}}
    config["pairs"]["u"] = copy.deepcopy(config["pairs"]["t"])
    config["pairs"]["far"] = {
        "mode": "ssh",
        "hosts": {"a": {}, "b": {"ssh": "bench@127.0.0.1", "ssh_port": port,
                                 "known_hosts": str(tmp / "known_hosts")}},
        # Adopted as they are: nothing on this machine is changed for the pair.
        "links": {"plain": {"interface_a": "lo", "interface_b": "lo", "adopt": True}},
    }
    work = workflow_copy(tmp, config)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPLITBENCH_STATE", str(work / ".splitbench"))
        try:
            # The run adopts the links the lab already built, detours and all.
            for pair, (failing, _) in FAILING_LINKS.items():
                detour(lab.ensure_link(plan.link_slice(parsed(config), pair, failing)))
            run = snakemake(work, "all")
        finally:
            teardown.teardown()
    summary = pd.read_parquet(work / "results/summary/cells.parquet")
    return {"work": work, "run": run, "out": run.stdout + run.stderr, "port": port,
            "summary": summary.set_index(["pair", "link", "model"]).sort_index()}


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_with_failures_exits_non_zero_and_still_reports(failed_run):
    """...and leaves nothing running: no server, no namespace."""
    assert failed_run["run"].returncode != 0
    assert "--forcerun what failed" in failed_run["out"]
    assert (failed_run["work"] / "results/report.html").exists()
    assert not {f"sb-{pair}-{side}" for pair in ("t", "u") for side in "ab"} & set(
        namespaces())
    assert not procs_left(failed_run["work"])


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("pair", ["t", "u"], ids=["a-link", "the-baseline"])
def test_a_link_that_fails_verification_is_a_result_not_a_lost_report(failed_run, pair):
    """A link whose verification fails is a row of the links table and a failed check;
    its blocks report why they were not launched; the other link is measured (alone,
    when the baseline is the one that failed)."""
    failing, other = FAILING_LINKS[pair]
    out, summary = failed_run["out"], failed_run["summary"]
    assert f"splitbench check FAILED: link {pair}/{failing} failed verification (its " \
           f"blocks were not launched): pair '{pair}', link '{failing}': host a routes" in out
    assert f"{pair}/{failing}/tiny did not load (1 cells not measured): link " \
           f"{pair}/{failing} failed" in out
    failed = summary.loc[[(pair, failing, "tiny")]]
    assert (failed["status"] == "load").all()
    assert failed["error"].str.contains(f"link {pair}/{failing} failed verification").all()
    measured = summary.loc[[(pair, other, "tiny")]]
    assert (measured["status"] == "ok").all() and (measured["decode_tps"] > 0).all()
    links = (failed_run["work"] / "results/tables/links.md").read_text()
    assert f"✗ verification failed: pair '{pair}', link '{failing}'" in links
    if failing == "plain":  # the anchors ran on it: the drift check says it could not
        assert f"splitbench check FAILED: drift check FAILED for {pair}/tiny" in out


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_pair_whose_host_b_cannot_be_reached_is_a_result_not_a_lost_report(failed_run):
    """An SSH pair whose host B does not answer: its toolchain and its link are rows that
    say why, its blocks are not launched, its cells report `load` without reaching for
    B, and the other pairs are measured and reported."""
    out, summary, work = failed_run["out"], failed_run["summary"], failed_run["work"]
    assert "splitbench check FAILED: pair far: toolchain failed (its blocks were not " \
           "launched): " in out, out[-3000:]
    # The doctor said it first, with its fix, printed and kept, and the run went on.
    doctor_said = (work / "results/doctor.txt").read_text()
    assert doctor_said in failed_run["run"].stdout
    assert "✗ far: host B (bench@127.0.0.1) cannot be reached" in doctor_said
    assert "✓ t: root: each host a network namespace" in doctor_said
    assert doctor_said.endswith("problem(s) above; the run goes on, and each one shows "
                                "where it bites, as a result (Ctrl-C now to fix them "
                                "first)\n")
    assert "splitbench check FAILED: link far/plain failed verification" in out
    assert "far/plain/tiny did not load (1 cells not measured)" in out
    toolchain = json.loads((work / "results/toolchain/far.json").read_text())
    assert toolchain["status"] == "failed" and str(failed_run["port"]) in toolchain["error"]
    far = summary.loc["far"]
    assert (far["status"] == "load").all()
    assert far["error"].str.contains("toolchain failed").all()
    measured = summary.loc[[("t", "plain", "tiny")]]
    assert (measured["status"] == "ok").all() and (measured["decode_tps"] > 0).all()
    assert "pair far: toolchain failed" in (work / "results/report.html").read_text()


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_model_that_dies_loading_is_a_result_and_the_rest_is_reported(failed_run):
    """Its blocks are rows that say why (the checks job failed: its printout is kept in
    its log); the other model's tables, charts and cells are written."""
    work, summary = failed_run["work"], failed_run["summary"]
    results = work / "results"
    checks = (results / "logs/checks.log").read_text()
    assert re.search(r"t/plain/cut did not load \(1 cells not measured\): llama-server "
                     r"(exited with code \d+|killed by SIG\w+) during start-up", checks), checks
    assert "t/slow/cut did not load" in checks
    assert "interference: not measured" not in checks  # what never ran is not unchecked
    assert (summary.loc[[("t", "plain", "tiny")], "status"] == "ok").all()
    assert (summary.xs("cut", level="model")["status"] == "load").all()
    assert (results / "charts/decode_ms_per_token.png").exists()
    decode = (results / "tables/single_stream_decode.md").read_text()
    assert [line for line in decode.splitlines() if "| cut |" in line]
    assert all("✗ load" in line for line in decode.splitlines() if "| cut |" in line)
    requests = pd.read_parquet(results / "cells/t/plain/cut/ctxshort_c1.requests.parquet")
    assert (requests["error_type"] == "launch_failed").all()
    assert requests["error_text"].str.match(
        r"the block's launch failed: llama-server (?:exited with code \d+|killed by "
        r"SIG\w+) during start-up").all()
