"""Several pairs at once: one slot per pair, and what a pair's cluster job asks for.

A pair is one set of machines: two of its jobs at the same time would measure each
other. Every job that touches a pair's hardware takes the pair's slot (a Snakemake
resource with capacity 1), so `--cores N` runs different pairs side by side and one
pair's jobs one after another, in their planned order. On a cluster (profiles/slurm)
the same jobs form one group job per pair, pinned to host A's node; these resources
tell SLURM which node and how long the pair's job may take.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from splitbench import pairs
from splitbench.configuration import Config
from splitbench.matrix import plan

# The rules that run on a pair's hardware: they take the pair's slot and, on a
# cluster, run inside the pair's job on host A's node.
PAIR_RULES = ("toolchain", "link", "launch", "cell", "anchor", "roundtrips")

# Minutes a setup job may take: a link check runs iperf3 and two probes, a toolchain
# check reads two builds, a launch loads the model into two servers.
SETUP_MINUTES = {"toolchain": 10, "link": 15, "launch": 20}


def slot(pair: str) -> str:
    """The pair's resource name (pair names may hold '-', resource names may not)."""
    return "pair_" + pair.replace("-", "__")


def slots(config: Config) -> dict[str, int]:
    """Every pair's slot with its capacity: one job at a time."""
    return {slot(pair): 1 for pair in config.pairs}


def slot_resources(config: Config) -> dict[str, Callable[[Any], int]]:
    """A pair rule's resources: 1 of its own pair's slot, 0 of the others."""
    return {slot(pair): (lambda w, pair=pair: int(w.pair == pair)) for pair in config.pairs}


def node_request(config: Config, pair: str) -> dict[str, str]:
    """What pins a pair's job to host A's node: `constraint` for a feature, and
    `slurm_extra` with --exclusive (no other job shares host A while it measures) and
    --nodelist for a node name."""
    host_a = config.pairs[pair].hosts.a
    extra = ["--exclusive"]
    if host_a.node:
        extra.append(f"--nodelist={host_a.node}")
    request = {"slurm_extra": " ".join(extra)}
    if host_a.feature:
        request["constraint"] = host_a.feature
    return request


def cell_minutes(config: Config, cell: plan.Cell) -> int:
    """The longest a cell may take: every request (or concurrent release) it sends one
    after another at the request timeout, plus a launch for a paired cell's reference
    servers."""
    settings = plan.cell_settings(config)
    timeout_min = settings["request_timeout_s"] / 60
    requests = max(settings["single_stream_requests"] if cell.conc == 1
                   else settings["concurrent_releases"], 1)
    paired = plan.paired_for(config, cell)
    if paired:
        requests = paired["rounds"] * paired["requests"] * 2
        return math.ceil(requests * timeout_min) + SETUP_MINUTES["launch"]
    return math.ceil(requests * timeout_min) + 1


def sweep_minutes(config: Config) -> int:
    """The longest a round-trips sweep may take: a launch and its requests per delay."""
    sweep = plan.roundtrip_settings(config)
    settings = plan.cell_settings(config)
    per_point = SETUP_MINUTES["launch"] + sweep["requests"] * settings["request_timeout_s"] / 60
    return math.ceil(len(sweep["delays_ms"]) * per_point)


def job_minutes(config: Config, rule: str, wildcards: Any) -> int:
    """A pair job's time limit in minutes, derived from the matrix. A pair's group job
    asks for the sum of its members' limits."""
    if rule in SETUP_MINUTES:
        return SETUP_MINUTES[rule]
    if rule == "roundtrips":
        return sweep_minutes(config)
    if rule == "anchor":
        cell = plan.anchor_cell(config, wildcards.pair, wildcards.model)
    else:
        cell = plan.Cell(wildcards.pair, wildcards.link, wildcards.model, wildcards.ctx,
                         int(wildcards.conc))
    return cell_minutes(config, cell)


def side_by_side_refusal(config: Config, root: bool) -> str | None:
    """Why these pairs cannot run side by side on this machine, or None. Without root
    the embedded lab is loopback, where two pairs' links share addresses and ports."""
    embedded = [pair for pair, spec in config.pairs.items()
                if pairs.of(spec.mode).on_this_machine]
    if root or len(embedded) < 2:
        return None
    return (f"embedded pairs {', '.join(embedded)} cannot run side by side without root: "
            "without network namespaces their links share loopback addresses and ports. "
            "Run as root, or with --cores 1 (one job at a time)")
