"""profiles/slurm on a real SLURM cluster: munged, slurmctld and one slurmd per pair node.

Two embedded pairs (each its own namespaces) are measured through `--profile
profiles/slurm`; what happened is read from SLURM's own job records (jobcomp), from
Snakemake's job timestamps (.snakemake/metadata) and from the results. Needs root: the
cluster's slurmd runs jobs as their user, and embedded pairs are network namespaces.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import tomllib
from importlib import metadata
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT
from tests.support import run_copy, table_after
from tests.support.slurm_cluster import Cluster, ClusterUnavailable
from tests.support.two_pairs import (
    FULL,
    PAIRS,
    SHORT,
    assert_pairs_took_turns,
    job_times,
    our_namespaces,
    two_pairs,
    two_pairs_copy,
)
from tests.support.workflow_run import SNAKEMAKE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.root]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("a SLURM test cluster needs root (slurmd runs jobs as their user, "
                    "and embedded pairs are network namespaces)")
    cluster = Cluster(tmp_path_factory.mktemp("slurm"), list(PAIRS))
    try:
        cluster.start()
    except ClusterUnavailable as error:
        cluster.stop()
        pytest.fail(f"could not start a SLURM test cluster: {error}")
    yield cluster
    cluster.stop()












def start(cluster: Cluster, work: Path) -> subprocess.Popen:
    # Jobs of a minute or two: ask SLURM how they are doing after 2 s at first, not 40.
    # The plugin waits 10 s longer after each check that finds no job done, so a job is
    # seen done up to one such wait after it ended: the shorter the first, the sooner.
    return subprocess.Popen(
        [SNAKEMAKE, "--profile", "profiles/slurm", "all", "--configfile",
         "config/examples/two-pairs.yaml", "--replace-workflow-config",
         "--slurm-init-seconds-before-status-checks", "2"],
        cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **cluster.env})


def run(cluster: Cluster, work: Path, timeout: float = 1500) -> tuple[int, str]:
    process = start(cluster, work)
    out, _ = process.communicate(timeout=timeout)
    return process.returncode, out


def slurm_jobs(cluster: Cluster) -> list[dict[str, str]]:
    """SLURM's own record of every finished job (jobcomp/filetxt: KEY=VALUE fields)."""
    path = cluster.root / "log" / "jobcomp.txt"
    if not path.exists():
        return []
    return [dict(field.split("=", 1) for field in line.split() if "=" in field)
            for line in path.read_text().splitlines() if line.strip()]












def alive_servers(work: Path) -> list[dict]:
    """Recorded server, worker and relay processes of the pair jobs that still run."""
    from splitbench.infra import procs

    out = []
    for path in (work / ".splitbench").glob("slurm-*/procs/*.json"):
        try:
            record = json.loads(path.read_text())
        except FileNotFoundError:  # stopped (and its record removed) since the listing
            continue
        if record.get("role") != "reaper" and procs.is_alive(record):
            out.append(record)
    return out




def test_the_profile_runs_with_the_plugin_versions_it_relies_on():
    """profiles/slurm's `mpi: 0` runs each job in its batch step because the jobstep
    plugin looks for an `mpi` resource: the versions installed are the ones pinned."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["slurm"]
    pinned = dict(requirement.split("==") for requirement in extra)
    assert set(pinned) == {"snakemake-executor-plugin-slurm",
                           "snakemake-executor-plugin-slurm-jobstep"}
    for name, version in pinned.items():
        assert metadata.version(name) == version, name


# The south pair's usb4 cells fail outright, before they measure: their output folder
# cannot be made (a file holds its name), as on a full or broken disk.
BROKEN = "results/cells/south/usb4/synth"


def relaunched_cells(work: Path) -> list[str]:
    """Cells that did not run on the servers their block's launch started."""
    out = []
    for cell in (work / "results/cells").rglob("ctx*_c*.parquet"):
        if cell.name.endswith(".requests.parquet"):
            continue
        pair, link, model = cell.parts[-4:-1]
        launch = json.loads((work / "results/servers" / pair / link / model
                             ).with_suffix(".json").read_text())
        own = pd.read_parquet(cell, columns=["launch_id", "reference"])
        own = own[~own["reference"].fillna(False).astype(bool)]
        if set(own["launch_id"]) != {launch["launch_id"]}:
            out.append(str(cell))
    return out


def planned_outputs(cluster: Cluster, work: Path) -> set[str]:
    plan = subprocess.run([SNAKEMAKE, "--profile", "profiles/slurm", "-n", "all",
                           "--configfile", "config/examples/two-pairs.yaml",
                           "--replace-workflow-config"], cwd=work, capture_output=True,
                          text=True, env={**os.environ, **cluster.env})
    assert plan.returncode == 0, plan.stdout + plan.stderr
    return {path.strip(", ") for line in plan.stdout.splitlines()
            if line.strip().startswith("output:") for path in line.split()[1:]}


@pytest.fixture(scope="module")
def failed(cluster, tmp_path_factory):
    """One run of the two pairs through the profile, south with failing cells: what ran
    side by side, what was kept and what the failure did, read by the tests below. A
    copy of the directory as the run left it is kept for the Ctrl-C test."""
    work = two_pairs_copy(tmp_path_factory.mktemp("two-pairs"), contexts=SHORT)
    broken = work / BROKEN
    broken.parent.mkdir(parents=True)
    broken.write_text("in the way")
    code, out = run(cluster, work)
    spare = run_copy(work, tmp_path_factory.mktemp("interrupted"))
    return {"work": work, "spare": spare, "code": code, "out": out,
            "files": {str(p.relative_to(work)) for p in (work / "results").rglob("*")
                      if p.is_file()},
            "jobs": [j for j in slurm_jobs(cluster) if j.get("WorkDir") == str(work)],
            "untouched": broken.read_text() == "in the way",
            "relaunched": relaunched_cells(work), "times": job_times(work),
            "servers_left": alive_servers(work), "namespaces_left": our_namespaces()}


@pytest.fixture(scope="module")
def mended(cluster, failed):
    """The disk mended: what the next run plans, and that run to its report."""
    work = failed["work"]
    (work / BROKEN).unlink()
    planned = planned_outputs(cluster, work)
    code, out = run(cluster, work)
    return {"work": work, "planned": planned, "code": code, "out": out}


def test_two_pairs_run_side_by_side_one_job_at_a_time_each_on_its_node(failed, mended):
    # SLURM's records: one job per pair, on the pair's node, the two at the same time;
    # the pair whose cells failed ends FAILED, the other COMPLETED.
    jobs = failed["jobs"]
    assert sorted(j["NodeList"] for j in jobs) == sorted(PAIRS), jobs
    assert {j["NodeList"]: j["JobState"] for j in jobs} == {
        "north": "COMPLETED", "south": "FAILED"}, jobs
    spans = [(pd.Timestamp(j["StartTime"]), pd.Timestamp(j["EndTime"])) for j in jobs]
    assert max(s for s, _ in spans) < min(e for _, e in spans), f"pairs ran apart: {spans}"

    # The jobs' own timestamps: within a pair, no two jobs overlapped; the pairs did.
    # South's usb4 cells never started (their jobs failed before a log was opened), and
    # so neither did the usb4 anchor that follows them.
    assert_pairs_took_turns(failed["times"], {"north": FULL,
                                              "south": {**FULL, "cells": 2, "anchors": 1}})

    # Every cell ran on the servers its block's launch started: none relaunched them.
    assert failed["relaunched"] == []

    # The pair jobs tore their pairs down before they ended, the failed one too.
    assert failed["servers_left"] == [] and failed["namespaces_left"] == []

    # Once mended, one report compares the pairs.
    assert mended["code"] == 0, mended["out"][-4000:]
    assert_the_report_compares_the_pairs((mended["work"] / "results/report.html").read_text())


def assert_the_report_compares_the_pairs(report: str) -> None:
    """Each pair's run (its links and its four cells), and each of its cells beside the
    other pair's, decode and the link's throughput measured."""
    runs = {row["pair"]: row for row in table_after(report, '<h3 id="pairs">Pairs</h3>')}
    side_by_side = table_after(report, '<section id="table-pairs">')
    for pair in PAIRS:
        links = list(two_pairs()["pairs"][pair]["links"])
        assert (runs[pair]["mode"], runs[pair]["links"], runs[pair]["cells"]) == (
            "embedded", ", ".join(links), str(len(links) * 2)), runs[pair]
        rows = [row for row in side_by_side if row["pair"] == pair]
        assert sorted((row["link"], row["conc"]) for row in rows) == sorted(
            (link, conc) for link in links for conc in ("1", "2")), rows
        for row in rows:
            assert re.match(r"\d+\.\d\d ±", row["decode (ms/token)"]), row
            assert re.match(r"\d+\.\d\d", row["A→B (Gbit/s)"]), row


def test_a_failed_cell_keeps_the_pairs_measured_cells(failed, mended):
    """What the failed run left (before the mended run), and what the mended run planned."""
    kept = failed["files"]
    assert failed["code"] != 0
    assert "results/cells/south/baseline/synth/ctxshort_c1.parquet" in kept, \
        failed["out"][-3000:]
    assert "results/servers/south/baseline/synth.json" in kept
    assert failed["untouched"]
    # The other pair is not touched by it.
    assert "results/cells/north/5gbe/synth/ctxshort_c1.parquet" in kept
    # Once the disk is mended, the next run plans the failed cells and what follows
    # them, not the cells measured, and nothing of the other pair's.
    planned = mended["planned"]
    assert f"{BROKEN}/ctxshort_c1.parquet" in planned, planned
    assert not any(p.startswith("results/cells/south/baseline/") for p in planned), planned
    assert not any("/north/" in p for p in planned), planned


def test_ctrl_c_leaves_no_server_or_namespace_behind(failed, cluster):
    """The mended rerun, in the copy of the failed run, interrupted once its servers
    run: SLURM cancels the job, and its reaper stops the servers and namespaces."""
    work = failed["spare"]
    (work / BROKEN).unlink(missing_ok=True)
    process = start(cluster, work)
    servers: list[dict] = []
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and process.poll() is None:
            servers = alive_servers(work)
            if (any(r["role"] == "llama-server" for r in servers)
                    and len(our_namespaces()) == 2):
                break
            time.sleep(0.5)
        assert process.poll() is None, process.communicate()[0][-3000:]
        assert servers, "no server ran before the deadline"
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and cluster.client(["squeue", "-h"]).stdout.strip():
        time.sleep(0.5)
    assert not cluster.client(["squeue", "-h"]).stdout.strip(), "jobs still queued"
    from splitbench.infra import procs

    # The jobs' reapers stand outside the cancelled jobs: give them a moment.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (our_namespaces() or alive_servers(work)):
        time.sleep(0.5)
    left = [r for r in servers if procs.is_alive(r)]
    assert left == [], f"still running after Ctrl-C: {left}"
    assert our_namespaces() == [], out[-3000:]
