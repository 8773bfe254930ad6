"""Planning a big matrix quickly: two places where Snakemake 9 repeats work per job.

Both change how often Snakemake does something, never what it concludes; both are
measured by benchmarks/plan_scale.py and held by tests/unit/test_planning.py.

    name_parameters_once(workflow.rules)   the input and params functions' signatures
    check_each_group_once()                the group-cycle check, once per group
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from snakemake.common import FUNC_OVERWRITE_PARAMS_ATTR, overwrite_function_params


def name_parameters_once(rules: Iterable[Any]) -> None:
    """Snakemake reads the parameters of a rule's input and params functions
    (inspect.signature) for every job: 50,000 times for a 5,000-cell matrix, a tenth of
    planning it. Give each function its parameters once, where Snakemake looks before
    it inspects (the attribute snakemake.common.overwrite_function_params sets)."""
    for each in rules:
        for item in [*each.input, *each.params]:
            if inspect.isfunction(item) and not hasattr(item, FUNC_OVERWRITE_PARAMS_ATTR):
                overwrite_function_params(item, inspect.signature(item).parameters)


def check_each_group_once() -> None:
    """Snakemake checks that no job group depends on itself by walking, from every job
    of a group, everything that job depends on; it does so once per job *in the DAG's
    job-to-group map*, so a group of n jobs is checked n times. profiles/slurm puts a
    pair's every job in one group (1,300 jobs a pair at 5,000 cells over 4 pairs): 46
    million steps, 14 of the 22 s that planning took. The same check, made with one
    entry per group, walks each group once and finds the same cycles."""
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
