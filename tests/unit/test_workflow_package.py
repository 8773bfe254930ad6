"""splitbench.workflow: what rules/common.smk binds, without Snakemake running. The
preflight checks, how a run runs its jobs, and each rule's inputs, priorities and
resources from the matrix (the same values the whole-workflow tests plan with)."""

from __future__ import annotations

import re
import tomllib
from types import SimpleNamespace

import pytest
import snakemake
import yaml
from packaging.specifiers import SpecifierSet

from splitbench.configuration import parsed
from splitbench.contracts import results
from splitbench.workflow import jobs, preflight, snakemake_internals
from tests.conftest import ROOT, tiny_config


@pytest.fixture
def tiny() -> dict:
    return tiny_config()


def wildcards(**values) -> SimpleNamespace:
    return SimpleNamespace(**values)


ONE_AT_A_TIME = preflight.Execution(cluster=False, side_by_side=False)


class FakeWorkflow(SimpleNamespace):
    """The public attributes of Snakemake's `workflow` the preflight reads."""

    @property
    def cores(self):
        if self._cores is None:
            raise RuntimeError("no --cores")  # as Snakemake's WorkflowError
        return self._cores


@pytest.mark.parametrize(("nodes", "cores", "expected"), [
    (None, 1, preflight.Execution(cluster=False, side_by_side=False)),
    (None, 2, preflight.Execution(cluster=False, side_by_side=True)),
    (4, None, preflight.Execution(cluster=True, side_by_side=False)),
])
def test_how_a_run_runs_its_jobs_is_read_from_cores_and_nodes(nodes, cores, expected):
    assert preflight.Execution.of(FakeWorkflow(nodes=nodes, _cores=cores)) == expected


def test_a_bad_config_is_refused_naming_its_key(tiny):
    tiny["models"]["tiny"]["layers_on_b"] = 99
    with pytest.raises(preflight.PreflightError) as raised:
        preflight.checked(tiny)
    assert str(raised.value).startswith("splitbench: invalid configuration: ")
    assert "models.tiny.layers_on_b" in str(raised.value)
    assert isinstance(raised.value, ValueError)  # Snakemake stops on it before any job


def test_the_config_is_parsed_into_the_typed_model_and_a_refused_key_named(tiny):
    from splitbench import configuration

    assert isinstance(preflight.checked(tiny), configuration.Config)
    tiny["pairs"]["t"]["links"]["slow"]["rate_gbit"] = -1
    with pytest.raises(preflight.PreflightError) as raised:
        preflight.checked(tiny)
    assert "config key 'pairs.t.links.slow.rate_gbit'" in str(raised.value)


def test_a_merged_config_file_is_refused_by_the_main_process(tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"pairs": tiny["pairs"]}))
    workflow = SimpleNamespace(
        config_settings=SimpleNamespace(replace_workflow_config=False, overwrite_config={}),
        overwrite_configfiles=[str(mine)], is_main_process=True, basedir=str(ROOT))
    with pytest.raises(preflight.PreflightError, match="--replace-workflow-config"):
        preflight.merged_config(tiny, workflow)
    workflow.config_settings.replace_workflow_config = True
    preflight.merged_config(tiny, workflow)  # asked for: nothing to refuse


def test_pairs_side_by_side_take_one_slot_each(tiny):
    two = {**tiny, "pairs": {"p": tiny["pairs"]["t"], "q": tiny["pairs"]["t"]}}
    side = preflight.Execution(cluster=False, side_by_side=True)
    assert preflight.pair_slots(parsed(two), side, is_root=True) == {"pair_p": 1, "pair_q": 1}
    assert preflight.pair_slots(parsed(two), ONE_AT_A_TIME, is_root=True) == {}
    with pytest.raises(preflight.PreflightError, match="without root"):
        preflight.pair_slots(parsed(two), side, is_root=False)
    resources = jobs.Jobs(parsed(two), side).pair_job("cell")
    assert {name: take(wildcards(pair="q")) for name, take in resources.items()} == {
        "pair_p": 0, "pair_q": 1}


def test_targets_list_every_cell_link_launch_and_anchor(tiny):
    matrix = jobs.Jobs(parsed(tiny), ONE_AT_A_TIME, reruns=ROOT / "no-such-reruns.yaml")
    cells = matrix.cell_results()
    assert len(cells) == 2 * 2 * 2 * 2  # links x models x contexts x levels
    assert len(set(cells)) == len(cells)
    assert len(matrix.request_results()) == len(cells)
    assert sorted(matrix.link_results()) == [results.link("t", "plain"),
                                             results.link("t", "slow")]
    assert len(matrix.launch_records()) == 4
    assert len(matrix.anchor_results()) == 2 * 2  # models x (start, end)
    assert matrix.roundtrip_targets() == []  # no roundtrips section


def test_the_end_anchor_waits_for_its_models_cells_only(tiny):
    matrix = jobs.Jobs(parsed(tiny), ONE_AT_A_TIME)
    assert matrix.anchor_inputs(wildcards(pair="t", model="tiny", when="start")) == {}
    end = matrix.anchor_inputs(wildcards(pair="t", model="tiny", when="end"))["cells"]
    assert len(end) == 8 and all("/tiny/" in str(path) for path in end)


def test_only_a_paired_cell_reads_the_baseline_links_check(tiny):
    matrix = jobs.Jobs(parsed(tiny), ONE_AT_A_TIME)
    paired = matrix.reference_link_result(
        wildcards(pair="t", link="slow", model="tiny", ctx="short", conc="1"))
    assert [str(p) for p in paired] == [results.link("t", "plain")]
    for link, ctx, conc in (("plain", "short", "1"), ("slow", "mid", "1"),
                            ("slow", "short", "2")):
        assert matrix.reference_link_result(
            wildcards(pair="t", link=link, model="tiny", ctx=ctx, conc=conc)) == []


def test_a_models_file_and_constraint_follow_its_kind(tiny):
    tiny["models"]["mine"] = {"path": "/models/mine.gguf", "layers_on_b": 1}
    matrix = jobs.Jobs(parsed(tiny), ONE_AT_A_TIME)
    assert matrix.model_file(wildcards(model="tiny")) == results.MODEL_FILE.format(
        model="tiny")
    assert matrix.model_file(wildcards(model="mine")) == "/models/mine.gguf"
    assert matrix.models_named("synthetic") == "tiny|tiny2"
    assert matrix.models_named("synthetic_own") == "(?!)"  # matches nothing
    assert matrix.own_formats() == matrix.own_toolchains() == "(?!)"
    # llama.cpp's launches are given the pair's default record
    assert matrix.backend_toolchain(wildcards(pair="t", model="tiny")) == \
        results.TOOLCHAIN.format(pair="t")


def test_a_backend_of_its_own_format_and_toolchain_gets_its_own_jobs(tiny):
    tiny["models"]["tp"] = {"synthetic": dict(tiny["models"]["tiny"]["synthetic"]),
                            "backend": "vllm", "vllm": {"tensor_parallel": 2}}
    matrix = jobs.Jobs(parsed(tiny), ONE_AT_A_TIME)
    assert matrix.model_file(wildcards(model="tp")) == "results/models/tp.hf"
    assert matrix.models_named("synthetic_own") == "tp"
    assert matrix.own_formats() == "hf" and matrix.own_toolchains() == "vllm"
    assert matrix.backend_toolchain(wildcards(pair="t", model="tp")) == \
        "results/toolchain/t.vllm.json"


def test_a_cells_epoch_comes_from_the_reruns_file(tiny, tmp_path):
    reruns = tmp_path / "reruns.yaml"
    reruns.write_text(yaml.safe_dump({"cells": {"t/slow/tiny/ctxshort_c1": 2}}))
    matrix = jobs.Jobs(parsed(tiny), ONE_AT_A_TIME, reruns=reruns)
    assert matrix.cell_epoch(wildcards(pair="t", link="slow", model="tiny", ctx="short",
                                       conc="1")) == 2
    assert matrix.cell_epoch(wildcards(pair="t", link="plain", model="tiny", ctx="short",
                                       conc="1")) == 0


def test_blocks_run_in_order_and_setup_first(tiny):
    matrix = jobs.Jobs(parsed(tiny), ONE_AT_A_TIME)
    order = [matrix.block_priority(wildcards(pair=p, link=link, model=m))
             for p, link, m in matrix.blocks]
    assert order == sorted(order, reverse=True)
    assert matrix.setup_priority > max(order)


def test_an_untested_snakemake_falls_back_and_says_so_once(capsys, monkeypatch):
    monkeypatch.setattr(snakemake_internals.tested, "said", False, raising=False)
    assert snakemake_internals.tested("9.27.1")
    assert not snakemake_internals.tested("10.1.0")
    assert not snakemake_internals.tested("9.99.0")
    said = capsys.readouterr().err
    assert said.count("Snakemake 10.1.0 is not one splitbench was tested with") == 1
    assert "9.99.0" not in said  # once per run


def test_the_snakemake_versions_admitted_are_the_versions_tested():
    """pyproject.toml admits exactly the minor releases the internals were tested with:
    a Snakemake that would silently lose the speed-ups and the lock clean-up is never
    installed by the project's own set-up."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pin = next(dep for dep in declared["dependencies"] if dep.startswith("snakemake"))
    admitted = SpecifierSet(pin.removeprefix("snakemake"))
    for minor in ("9.26", "9.27", "9.28", "10.0"):
        assert (f"{minor}.0" in admitted) == (minor in snakemake_internals.TESTED), pin
    assert snakemake.__version__ in admitted
    assert snakemake_internals.tested()


def test_planning_falls_back_to_snakemakes_own_on_an_untested_release(monkeypatch):
    """On a release not tested, neither speed-up touches Snakemake: its group check and
    a rule's functions are left exactly as they were."""
    import snakemake.api  # noqa: F401  (snakemake.dag first is a circular import)
    from snakemake.dag import DAG

    monkeypatch.setattr(snakemake_internals, "tested", lambda: False)
    original = DAG._check_groups
    snakemake_internals.check_each_group_once()
    assert DAG._check_groups is original

    def input_function(wildcards):
        return []

    snakemake_internals.name_parameters_once([SimpleNamespace(input=[input_function],
                                                              params=[])])
    assert vars(input_function) == {}


def test_pair_slots_are_registered_or_refused_on_an_untested_snakemake(monkeypatch):
    registered = {}
    workflow = SimpleNamespace(register_resource=registered.__setitem__)
    snakemake_internals.register_resources(workflow, {"pair_p": 1, "pair_q": 1})
    assert registered == {"pair_p": 1, "pair_q": 1}
    monkeypatch.setattr(snakemake_internals, "tested", lambda: False)
    snakemake_internals.register_resources(workflow, {})  # one at a time: nothing to keep
    with pytest.raises(ValueError, match="run with --cores 1"):
        snakemake_internals.register_resources(workflow, {"pair_p": 1})
    assert snakemake_internals.own_locks(workflow) == []  # left for snakemake --unlock


def test_only_the_pair_jobs_runner_tears_the_pair_down_as_it_exits(monkeypatch):
    runner = ["snakemake", "--executor", "slurm-jobstep", "--mode", "remote"]
    one_job = ["snakemake", "--mode", "remote", "--target-jobs", "cell:pair=south"]
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert snakemake_internals.in_cluster_job(runner)
    assert not snakemake_internals.in_cluster_job(one_job)  # it ends after each job: not then
    monkeypatch.delenv("SLURM_JOB_ID")
    assert not snakemake_internals.in_cluster_job(runner)  # outside SLURM



# What Snakemake documents of its `workflow` object for a Snakefile's own use.
DOCUMENTED = {"basedir", "rules", "source_path", "current_basedir"}
# `workflow.<attribute>` in Python or Snakemake's syntax (not a path: report/workflow.rst).
WORKFLOW_ATTRIBUTE = re.compile(r"(?<![\w/.])workflow\.([a-z_]+)")


def test_only_the_internals_module_reads_snakemakes_workflow_object():
    sources = [*(ROOT / "splitbench").rglob("*.py"), ROOT / "Snakefile",
               *(ROOT / "rules").glob("*.smk")]
    readers: dict[str, set[str]] = {}
    for path in sources:
        if path.name != "snakemake_internals.py":
            for attribute in WORKFLOW_ATTRIBUTE.findall(path.read_text()):
                readers.setdefault(attribute, set()).add(path.name)
    assert "rules" in readers  # the scan sees the Snakefile's own (documented) use
    assert {name: where for name, where in readers.items() if name not in DOCUMENTED} == {}
