"""Every use of Snakemake's internals, in one place, each guarded by the version.

Two speed-ups for planning a big matrix, where Snakemake 9 repeats work per job; both
change how often Snakemake does something, never what it concludes (measured by
benchmarks/plan_scale.py, held by tests/unit/test_planning.py):

    name_parameters_once(workflow.rules)   the input and params functions' signatures
    check_each_group_once()                the group-cycle check, once per group

and `own_locks(workflow)`, this run's lock files, which the reaper removes after a
killed run, and `register_resources(workflow, slots)`, the pairs' slots when jobs run
side by side (undocumented, though long stable). On a Snakemake minor release they were
not tested with, each falls back to Snakemake's own behaviour (no speed-up; locks left
for `snakemake --unlock`; pairs side by side refused) and the run says so once.

What the workflow reads of the run's own settings is here too, each read with the value
that means "not given" where the attribute is missing: `config_files(workflow)` (the
--configfile files and --replace-workflow-config, for the merge check),
`is_main_process(workflow)`, `on_cluster(workflow)` and `cores(workflow)`, and from
Snakemake's command line, `in_cluster_job(argv)` (the SLURM jobstep executor's runner).
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import snakemake

# The minor releases these were written against and tested with (envs/constraints.txt):
# the very range pyproject.toml admits (tests/unit/test_workflow_package.py holds it).
TESTED = ("9.27",)


def tested(version: str = snakemake.__version__) -> bool:
    """Whether this Snakemake is one the internals below were tested with; says once
    (on stderr) what falls back when it is not."""
    if ".".join(version.split(".")[:2]) in TESTED:
        return True
    if not getattr(tested, "said", False):
        tested.said = True  # type: ignore[attr-defined]
        print(f"splitbench: Snakemake {version} is not one splitbench was tested with "
              f"({', '.join(TESTED)}): planning runs without its speed-ups, and a killed "
              "run's lock files are left for `snakemake --unlock`", file=sys.stderr)
    return False


def register_resources(workflow: Any, capacities: dict[str, int]) -> None:
    """Make each resource (a pair's slot) available with its capacity, as --resources
    would. Without it, two jobs of one pair could run at once: refused instead."""
    if not capacities:
        return
    if not tested():
        raise ValueError("splitbench: on this Snakemake, pairs cannot be kept to one job "
                         "at a time when jobs run side by side: run with --cores 1")
    for name, capacity in capacities.items():
        workflow.register_resource(name, capacity)


def own_locks(workflow: Any) -> list[str]:
    """This run's Snakemake lock files: a killed run leaves them behind. Another run's
    locks in the same directory are not ours to remove. Snakemake names them only in a
    private attribute; without it the reaper removes none (`snakemake --unlock` does)."""
    if not tested():
        return []
    return list(getattr(workflow.persistence, "_lockfile", {}).values())


def name_parameters_once(rules: Iterable[Any]) -> None:
    """Snakemake reads the parameters of a rule's input and params functions
    (inspect.signature) for every job: 50,000 times for a 5,000-cell matrix, a tenth of
    planning it. Give each function its parameters once, where Snakemake looks before
    it inspects (the attribute snakemake.common.overwrite_function_params sets). A bound
    method (`splitbench.workflow.jobs`) keeps it on its function, where Snakemake's
    lookup finds it, with the parameters of the method as bound."""
    if not tested():
        return
    from snakemake.common import FUNC_OVERWRITE_PARAMS_ATTR, overwrite_function_params

    for each in rules:
        for item in [*each.input, *each.params]:
            function = item.__func__ if inspect.ismethod(item) else item
            if inspect.isfunction(function) and not hasattr(function,
                                                             FUNC_OVERWRITE_PARAMS_ATTR):
                overwrite_function_params(function, inspect.signature(item).parameters)


def check_each_group_once() -> None:
    """Snakemake checks that no job group depends on itself by walking, from every job
    of a group, everything that job depends on; it does so once per job *in the DAG's
    job-to-group map*, so a group of n jobs is checked n times. profiles/slurm puts a
    pair's every job in one group (1,300 jobs a pair at 5,000 cells over 4 pairs): 46
    million steps, 14 of the 22 s that planning took. The same check, made with one
    entry per group, walks each group once and finds the same cycles."""
    if not tested():
        return
    import snakemake.api  # noqa: F401  (snakemake.dag first is a circular import)
    from snakemake.dag import DAG

    original = DAG._check_groups
    if getattr(original, "once_per_group", False):
        return

    def _check_groups(dag: Any) -> None:
        by_job = dag._group
        one_each = {id(group): group for group in by_job.values()}
        dag._group = {next(iter(group)): group for group in one_each.values()}
        try:
            original(dag)
        finally:
            dag._group = by_job

    _check_groups.once_per_group = True  # type: ignore[attr-defined]
    DAG._check_groups = _check_groups


@dataclass(frozen=True)
class ConfigFiles:
    """The --configfile files of this run, and what Snakemake made of them."""

    replace: bool  # --replace-workflow-config: the files alone, config/config.yaml not read
    paths: list[str] = field(default_factory=list)
    merged: dict[str, Any] = field(default_factory=dict)  # the files' keys, merged


def config_files(workflow: Any) -> ConfigFiles:
    """The config files given on the command line (none where this Snakemake keeps them
    elsewhere: the merge check then has nothing to compare)."""
    settings = getattr(workflow, "config_settings", None)
    return ConfigFiles(
        replace=bool(getattr(settings, "replace_workflow_config", False)),
        paths=list(getattr(workflow, "overwrite_configfiles", None) or []),
        merged=dict(getattr(settings, "overwrite_config", None) or {}))


def is_main_process(workflow: Any) -> bool:
    """The Snakemake a person started, not one that runs a single job for it."""
    return bool(getattr(workflow, "is_main_process", True))


def on_cluster(workflow: Any) -> bool:
    """Jobs go to a cluster (--jobs with an executor), not to this machine."""
    return getattr(workflow, "nodes", None) is not None


def cores(workflow: Any) -> int | None:
    """--cores, or None where none was given (a cluster run)."""
    try:
        return workflow.cores
    except Exception:  # Snakemake's WorkflowError: no --cores given
        return None


def in_cluster_job(argv: list[str]) -> bool:
    """This process is a pair's cluster job runner: the Snakemake that SLURM starts with
    the jobstep executor, which runs the pair's jobs one after another. Not the
    Snakemake processes it starts for single jobs, which run in remote mode too and
    must not tear the pair down when each of them ends."""
    return "slurm-jobstep" in argv and bool(os.environ.get("SLURM_JOB_ID"))
