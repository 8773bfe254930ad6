"""What the workflow checks before anything starts, and how this run runs its jobs.

Each check raises `PreflightError` with a message that names the problem (a config key,
a missing vLLM, a merged config file); the Snakefile lets it end the run there, before
any job, so nothing measured is touched.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from splitbench import backends, configuration
from splitbench.contracts import registry
from splitbench.errors import SplitbenchError
from splitbench.matrix import plan
from splitbench.workflow import cluster, snakemake_internals


class PreflightError(SplitbenchError, ValueError):
    """The run cannot start; the message says why (Snakemake prints it and stops)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"splitbench: {message}")


def merged_config(config: dict[str, Any], workflow: Any) -> None:
    """Refuse a --configfile merged into config/config.yaml, which would add the
    embedded lab (and the rest of the default) to the user's own pair, unasked.

    Snakemake does not pass --replace-workflow-config on to cluster jobs: the main
    process refuses a merge unless it was given, so a job that sees one uses the given
    files alone (`config` is replaced in place), as the main process did."""
    files = snakemake_internals.config_files(workflow)
    if files.replace:
        return
    given = [plan.read_yaml(path) for path in files.paths]
    merged_in = plan.entries_merged_in(plan.read_yaml("config/config.yaml"), given)
    if not merged_in:
        return
    if snakemake_internals.is_main_process(workflow):
        raise PreflightError(
            "Snakemake merged your config file into config/config.yaml, which adds what "
            f"your file does not define: {', '.join(merged_in[:12])}"
            f"{' ...' if len(merged_in) > 12 else ''}. Add --replace-workflow-config to "
            "use only your file, or define these in it.")
    from snakemake.utils import validate

    config.clear()
    config.update(copy.deepcopy(files.merged))
    plan.names_as_text(config)
    validate(config, str(Path(workflow.basedir) / "config/schema.yaml"))


def checked(config: dict[str, Any]) -> configuration.Config:
    """The config as the typed model (its keys and the checks across them), what each
    model's backend refuses (`Backend.check_model`) and what this machine lacks for a
    backend the config uses (`Backend.missing_here`: vLLM's environment for an embedded
    pair). Every planning function reads this model."""
    try:
        typed = configuration.parsed(config)
        backends.check_models(typed)
    except (configuration.ConfigError, registry.RegistryError) as error:
        raise PreflightError(f"invalid configuration: {error}") from None
    for backend in backends.used(typed):
        missing = backend.missing_here(typed)
        if missing:
            raise PreflightError(missing)
    return typed


@dataclass(frozen=True)
class Execution:
    """How this run runs its jobs: one at a time (--cores 1), several side by side on
    this machine (--cores N), or as cluster jobs (profiles/slurm: --jobs)."""

    cluster: bool
    side_by_side: bool

    @classmethod
    def of(cls, workflow: Any) -> Execution:
        on_cluster = snakemake_internals.on_cluster(workflow)
        cores = snakemake_internals.cores(workflow)
        return cls(on_cluster, not on_cluster and (cores is None or cores > 1))


def pair_slots(config: configuration.Config, execution: Execution,
               is_root: bool) -> dict[str, int]:
    """The resources that keep one job at a time on each pair when jobs run side by
    side on this machine ({} otherwise: on a cluster, a pair's jobs form one group
    job); refuses embedded pairs that cannot run side by side here."""
    if not execution.side_by_side:
        return {}
    refusal = cluster.side_by_side_refusal(config, is_root)
    if refusal:
        raise PreflightError(refusal)
    return cluster.slots(config)
