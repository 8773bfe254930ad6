"""Several pairs at once: each pair's slot, node request and time limit
(splitbench/workflow/cluster.py)."""

import copy
from types import SimpleNamespace

import pytest
import yaml

from splitbench import configuration
from splitbench.configuration import parsed
from splitbench.infra import procs
from splitbench.matrix import plan
from splitbench.workflow import cluster
from tests.conftest import ROOT


@pytest.fixture
def config():
    return yaml.safe_load((ROOT / "config/examples/two-pairs.yaml").read_text())


def cell(pair="north", link="5gbe", ctx="short", conc="1"):
    return SimpleNamespace(pair=pair, link=link, model="synth", ctx=ctx, conc=conc)


def test_each_pair_has_a_slot_of_one_that_only_its_own_jobs_take(config):
    config["pairs"]["far-east"] = copy.deepcopy(config["pairs"]["south"])
    assert cluster.slots(parsed(config)) == {"pair_north": 1, "pair_south": 1, "pair_far__east": 1}
    takes = cluster.slot_resources(parsed(config))
    assert {name: amount(cell("far-east")) for name, amount in takes.items()} == {
        "pair_north": 0, "pair_south": 0, "pair_far__east": 1}


def test_a_pair_job_holds_host_as_node_alone(config):
    assert cluster.node_request(parsed(config), "north") == {
        "slurm_extra": "--exclusive", "constraint": "pair_north"}
    config["pairs"]["north"]["hosts"]["a"] = {"node": "nuc-a1"}
    assert cluster.node_request(parsed(config), "north") == {
        "slurm_extra": "--exclusive --nodelist=nuc-a1"}


def test_time_limits_follow_the_matrix(config):
    timeout_min = config["cell"]["request_timeout_s"] / 60  # 2 minutes
    # A paired cell: rounds x requests x 2 links at the timeout, plus its reference launch.
    paired = config["cell"]["paired"]["rounds"] * 2 * timeout_min + 20
    assert cluster.job_minutes(parsed(config), "cell", cell()) == paired
    # Concurrency 2: its releases one after another, each at the timeout.
    releases = plan.cell_settings(parsed(config))["concurrent_releases"]
    assert releases > 1
    assert cluster.job_minutes(parsed(config), "cell", cell(conc="2")) == releases * timeout_min + 1
    # A single stream: its requests one after another.
    requests = plan.cell_settings(parsed(config))["single_stream_requests"]
    assert cluster.job_minutes(parsed(config), "anchor", cell(link="baseline")) == \
        requests * timeout_min + 1
    config["cell"]["request_timeout_s"] = 600
    assert cluster.job_minutes(parsed(config), "cell", cell(conc="2")) == releases * 10 + 1
    assert cluster.job_minutes(parsed(config), "link", cell()) == cluster.SETUP_MINUTES["link"]


@pytest.mark.parametrize(("side", "hosts", "key"), [
    ("b", {"a": {}, "b": {"node": "n1"}}, "pairs.north.hosts.b.node"),
    ("b", {"a": {}, "b": {"feature": "f"}}, "pairs.north.hosts.b.feature"),
    ("a", {"a": {"node": "n1", "feature": "f"}, "b": {}}, "pairs.north.hosts.a"),
])
def test_only_host_a_names_its_node_and_in_one_way(config, side, hosts, key):
    config["pairs"]["north"]["hosts"] = hosts
    with pytest.raises(configuration.ConfigError, match=key.replace(".", r"\.")):
        configuration.parsed(config)


def test_a_pair_job_keeps_its_records_apart(monkeypatch, tmp_path):
    """On a shared filesystem another node's pids are not this node's: a SLURM job's
    records live in a directory of its own, and asking again does not nest it."""
    monkeypatch.setenv("SPLITBENCH_STATE", str(tmp_path))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert procs.state_dir() == tmp_path
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    assert procs.state_dir() == tmp_path / "slurm-42"
    monkeypatch.setenv("SPLITBENCH_STATE", str(tmp_path / "slurm-42"))
    assert procs.state_dir() == tmp_path / "slurm-42"


def test_embedded_pairs_side_by_side_need_root(config):
    """Without namespaces two pairs' loopback links would share addresses and ports."""
    assert cluster.side_by_side_refusal(parsed(config), root=True) is None
    refusal = cluster.side_by_side_refusal(parsed(config), root=False)
    assert "north, south" in refusal and "--cores 1" in refusal
    del config["pairs"]["south"]
    assert cluster.side_by_side_refusal(parsed(config), root=False) is None
