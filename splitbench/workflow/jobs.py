"""What each rule's jobs need from the matrix: the `all` targets, input functions,
priorities, resources and the per-job epoch. rules/common.smk makes one `Jobs` and binds
its methods by name; the rules read those names."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from snakemake.io import ancient

from splitbench import backends, pairs
from splitbench.configuration import Config, Model
from splitbench.contracts import registry, results
from splitbench.matrix import plan
from splitbench.workflow import cluster
from splitbench.workflow.preflight import Execution

Wildcards = Any  # Snakemake's wildcards object: attributes named after the wildcards


def as_json(value: Any) -> str:
    """A config slice as a stable string: a rerun trigger and a command argument."""
    return json.dumps(value, sort_keys=True)


def splitbench_command(stage: str, *arguments: str) -> str:
    """A rule's shell command: `python -m splitbench <stage> <arguments>`, its output in
    the rule's log. This string is Snakemake's code trigger for the rule: changing it (a
    renamed flag, say) re-runs every job of the rule; editing the package does not."""
    return " ".join(["python -m splitbench", stage, *arguments, "> {log:q} 2>&1"])


def model_kind(spec: Model) -> str:
    """How a model's file is had: a synthetic model in the default backend's format
    (results.MODEL_FILE), one in its backend's own format (`Backend.model_format`), one
    fetched from PyPI, or a path given."""
    if spec.synthetic:
        own = backends.get(spec.backend).model_format != registry.DEFAULT_MODEL_FORMAT
        return "synthetic_own" if own else "synthetic"
    return "source" if spec.source else "path"


class Jobs:
    """The matrix of one run (its cells and blocks in run order, computed once: every
    job's priority looks them up) and what its rules ask of it."""

    def __init__(self, config: Config, execution: Execution,
                 reruns: str = "config/reruns.yaml") -> None:
        self.config = config
        self.execution = execution
        # The links' order turns between runs; a run that resumes keeps its own.
        self.rotation = plan.chosen_rotation(results.BLOCK_ORDER)
        self.cells = plan.cells(config, self.rotation)
        self.blocks = plan.blocks(config, self.rotation)
        # Link checks, toolchains and models run before any block.
        self.setup_priority = plan.setup_priority(self.blocks)
        # Epochs of cells flagged for re-measurement (splitbench drift --apply).
        self.epochs = plan.epochs(reruns)

    def record_order(self) -> None:
        """Written when the run starts (not by a dry run): the rotation it chose."""
        plan.record_order(results.BLOCK_ORDER, self.rotation, self.blocks)

    # --- targets ----------------------------------------------------------------------
    def link_results(self) -> list[str]:
        return [results.link(pair, link) for pair, spec in self.config.pairs.items()
                for link in spec.links]

    def launch_records(self) -> list[str]:
        """Requested by `all` so that a launch whose settings changed (a longer context,
        more concurrency) re-runs: its cells take it as an `ancient` input, which alone
        would never ask for it again."""
        return [results.launch(pair, link, model) for pair, link, model in self.blocks]

    def cell_results(self) -> list[str]:
        return [cell.path for cell in self.cells]

    def request_results(self) -> list[str]:
        return [results.cell_requests(c.pair, c.link, c.model, c.ctx, c.conc)
                for c in self.cells]

    def toolchain_records(self) -> list[str]:
        """Each pair's toolchain records that its models' launches are given (the
        report's provenance): the default record where a backend keeps none of its
        own, and each own one."""
        return list(dict.fromkeys(
            self._toolchain_of(pair, spec.backend) for pair in self.config.pairs
            for spec in self.config.models.values()))

    def roundtrip_results(self) -> list[str]:
        return [results.roundtrips(*sweep) for sweep in plan.roundtrip_sweeps(self.config)]

    def roundtrip_targets(self) -> list[str]:
        """The sweeps and their table, when config has a `roundtrips` section."""
        sweeps = self.roundtrip_results()
        return [*sweeps, results.table("round_trips", "md")] if sweeps else []

    def anchor_results(self) -> list[str]:
        return [results.anchor(pair, model, when, requests=True)
                for pair in self.config.pairs for model in self.config.models
                for when in ("start", "end")]

    # --- input functions --------------------------------------------------------------
    def anchor_inputs(self, wildcards: Wildcards) -> dict[str, list[Any]]:
        """The end anchor waits for every cell of its model on its pair (ancient: it
        marks the end of the model's first pass; re-measuring a cell later must not
        re-run it). A cell whose file is missing when a run is planned (a rerun killed
        mid-cell) does re-run it, as "updated by another job": Snakemake passes over an
        ancient input only where the file exists. The anchor is then measured again
        after that cell, and its earlier measurement archived."""
        if wildcards.when != "end":
            return {}
        return {"cells": [ancient(c.path) for c in self.cells
                          if (c.pair, c.model) == (wildcards.pair, wildcards.model)]}

    def reference_link_result(self, wildcards: Wildcards) -> list[Any]:
        """A paired cell's reference: the baseline link's verification (ancient, as the
        cell's own link); nothing for other cells."""
        cell = plan.Cell(wildcards.pair, wildcards.link, wildcards.model, wildcards.ctx,
                         int(wildcards.conc))
        if plan.paired_for(self.config, cell) is None:
            return []
        return [ancient(results.link(wildcards.pair, self.config.baseline_link))]

    def sweep_link_result(self, wildcards: Wildcards) -> list[Any]:
        """A real pair's sweep runs on its baseline link: that link's verification
        (ancient, as a cell's); nothing for an embedded pair's (its links are its own)."""
        if not pairs.of(self.config.pairs[wildcards.pair].mode).sweep_on_baseline_link:
            return []
        return [ancient(results.link(wildcards.pair, self.config.baseline_link))]

    def model_file(self, wildcards: Wildcards) -> str:
        spec = self.config.models[wildcards.model]
        kind = model_kind(spec)
        if kind == "synthetic_own":
            return results.MODEL_OWN.format(
                model=wildcards.model, format=backends.get(spec.backend).model_format)
        if kind in ("synthetic", "source"):
            return results.MODEL_FILE.format(model=wildcards.model)
        return spec.path

    def backend_toolchain(self, wildcards: Wildcards) -> str:
        """The toolchain record a launch (and its cells, its model's anchors) is given:
        its backend's own of the pair where the backend keeps one
        (`Backend.own_toolchain`: vLLM's), else the pair's default record (llama.cpp's)."""
        return self._toolchain_of(wildcards.pair, self.config.models[wildcards.model].backend)

    @staticmethod
    def _toolchain_of(pair: str, backend_name: str) -> str:
        backend = backends.get(backend_name)
        if backend.own_toolchain:
            return results.TOOLCHAIN_OWN.format(pair=pair, backend=backend.name)
        return results.TOOLCHAIN.format(pair=pair)

    def own_toolchains(self) -> str:
        """A wildcard constraint: the backends of the config's models that keep a
        toolchain record of their own (a regex that matches nothing when none do)."""
        names = [re.escape(backend.name) for backend in backends.used(self.config)
                 if backend.own_toolchain]
        return "|".join(names) or "(?!)"

    def own_formats(self) -> str:
        """A wildcard constraint: the model formats of the config's backends other than
        the default's (a regex that matches nothing when there are none)."""
        formats = ({backend.model_format for backend in backends.used(self.config)}
                   - {registry.DEFAULT_MODEL_FORMAT})
        return "|".join(sorted(re.escape(f) for f in formats)) or "(?!)"

    def models_named(self, *kinds: str) -> str:
        """A wildcard constraint: the models of these kinds (every model when none is
        given; a regex that matches nothing when there are none)."""
        names = [re.escape(name) for name, spec in self.config.models.items()
                 if not kinds or model_kind(spec) in kinds]
        return "|".join(names) or "(?!)"

    # --- order and resources ----------------------------------------------------------
    def cell_epoch(self, wildcards: Wildcards) -> int:
        """The cell's epoch in config/reruns.yaml (drift --apply bumps it to
        re-measure)."""
        key = plan.cell_key(wildcards.pair, wildcards.link, wildcards.model, wildcards.ctx,
                            wildcards.conc)
        return self.epochs.get(key, 0)

    def block_priority(self, wildcards: Wildcards) -> int:
        return plan.block_priority(self.config, wildcards.pair, wildcards.link,
                                   wildcards.model, order=self.blocks)

    def launch_priority(self, wildcards: Wildcards) -> int:
        return plan.launch_priority(self.config, wildcards.pair, wildcards.link,
                                    wildcards.model, order=self.blocks)

    def anchor_priority(self, wildcards: Wildcards) -> int:
        return plan.anchor_priority(self.config, wildcards.pair, wildcards.model,
                                    wildcards.when, order=self.blocks)

    def pair_job(self, rule: str) -> dict[str, Callable[[Wildcards], Any]]:
        """The resources of a job on a pair's hardware: its pair's slot, or, for a
        cluster job, host A's node and a time limit derived from the matrix. Resources
        nobody needs are left out: Snakemake evaluates each for every job, and at 5,000
        cells that is seconds of planning (benchmarks/plan_scale.py)."""
        config = self.config
        if self.execution.cluster:
            resources: dict[str, Callable[[Wildcards], Any]] = {
                "runtime": lambda w: cluster.job_minutes(config, rule, w),
                "slurm_extra": lambda w: cluster.node_request(config, w.pair)["slurm_extra"],
                "constraint": lambda w: cluster.node_request(config, w.pair).get("constraint"),
            }
            return resources
        return cluster.slot_resources(config) if self.execution.side_by_side else {}
