"""config/examples/seed-6x3.yaml, the seed write-up's matrix on two real machines: it
passes the schema and the checks, plans 270 cells without reaching host B, and the
duration docs/two-machines.md gives for it is the estimate's."""

from __future__ import annotations

import re
import socket

import pandas as pd
import pytest
import yaml
from snakemake.utils import validate

from splitbench import backends, configuration
from splitbench.configuration import parsed
from splitbench.matrix import estimate, plan
from tests.conftest import ROOT
from tests.support.workflow_run import snakemake, workflow_copy

EXAMPLE = ROOT / "config/examples/seed-6x3.yaml"
SEED_SUMMARY = ROOT / "tests/unit/fixtures/seed_002_summary.csv"
MODELS = ["Qwen3.6-35B-A3B-Q8_0", "gpt-oss-120b-MXFP4", "GLM-4.5-Air-Q4_K_M",
          "Qwen3-235B-A22B-Q2_K_XL", "Llama-3.3-70B-Q6_K", "Qwen2.5-72B-Q6_K"]


def seed_config() -> dict:
    config = yaml.safe_load(EXAMPLE.read_text())
    plan.names_as_text(config)
    return config


def test_the_seed_matrix_passes_the_schema_and_the_checks():
    config = seed_config()
    validate(config, str(configuration.SCHEMA))
    backends.check_models(configuration.parsed(config))
    assert list(config["models"]) == MODELS
    assert all(spec["path"].startswith("/models/") and spec["layers_on_b"] >= 1
               for spec in config["models"].values())
    (pair,) = config["pairs"].values()
    assert pair["mode"] == "ssh" and list(pair["links"]) == ["5gbe", "usb4", "usb10g"]
    assert config["baseline_link"] == "5gbe"
    # The seed's five contexts (the embedded default stops at 5k to fit 2 cores).
    assert config["contexts"] == {"short": 128, "5k": 5000, "32k": 32000, "52k": 52000,
                                  "100k": 100000}
    assert list(config["contexts"]) == ["short", "5k", "32k", "52k", "100k"]
    assert config["concurrency"] == [1, 2, 4]
    check = plan.link_check_settings(parsed(config))
    assert check["iperf_seconds"] >= 10 and check["iperf_omit"] == 2
    # Pairing would hold two launches of one model at once.
    assert not plan.paired_settings(parsed(config))["rounds"]


def job_counts(stdout: str) -> dict[str, int]:
    return {line.split()[0]: int(line.split()[1]) for line in stdout.splitlines()
            if len(line.split()) == 2 and line.split()[1].isdigit()}


def test_the_seed_matrix_plans_without_reaching_host_b(tmp_path):
    """A dry run with the model paths on tiny placeholder files and host B's SSH port on
    a socket that listens here: every job is planned, and nothing connects to B."""
    config = yaml.safe_load(EXAMPLE.read_text())
    models = tmp_path / "models"
    models.mkdir()
    for name, spec in config["models"].items():
        placeholder = models / f"{name}.gguf"
        placeholder.write_bytes(b"GGUF")
        spec["path"] = str(placeholder)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    host_b = config["pairs"]["seed"]["hosts"]["b"]
    host_b.update(ssh="bench@127.0.0.1", ssh_port=listener.getsockname()[1],
                  known_hosts=str(tmp_path / "known_hosts"))
    work = workflow_copy(tmp_path)
    (work / "seed.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    try:
        result = snakemake(work, "-n", "--quiet", "rules", "all", "--configfile",
                           "seed.yaml", "--replace-workflow-config", timeout=300)
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # no connection waits: planning never reached host B
    finally:
        listener.close()
    assert result.returncode == 0, result.stderr[-2000:]
    counts = job_counts(result.stdout)
    assert {rule: counts.get(rule) for rule in
            ("cell", "launch", "link", "anchor", "model_info", "toolchain")} == {
        "cell": 6 * 3 * 5 * 3,   # models x links x contexts x levels
        "launch": 6 * 3,         # one per (link, model) block
        "link": 3,
        "anchor": 6 * 2,         # each model's start and end
        "model_info": 6,
        "toolchain": 1,
    }
    assert counts["report"] == counts["all"] == 1
    assert "roundtrips" not in counts  # the sweep emulates delay: embedded pairs only
    assert not (work / "results").exists()


def seed_speeds() -> dict:
    """The seed write-up's single-stream rates under the example's model names."""
    summary = pd.read_csv(SEED_SUMMARY)
    summary["model"] = summary["model"].str.replace(" ", "-")
    return estimate.speeds_from_summary(summary)


def test_the_docs_give_the_estimated_duration():
    parts = estimate.expected_seconds(parsed(seed_config()), seed_speeds())
    hours = round(parts["total"] / 3600)
    section = (ROOT / "docs/two-machines.md").read_text().split("## The seed's matrix")[1]
    assert re.search(rf"\babout {hours} hours\b", section), (hours, parts)
    assert "config/examples/seed-6x3.yaml" in (ROOT / "README.md").read_text()
