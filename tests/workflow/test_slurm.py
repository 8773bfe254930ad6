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
import yaml

from tests.conftest import ROOT
from tests.slurm_cluster import Cluster, ClusterUnavailable
from tests.workflow.test_workflow import SNAKEMAKE, workflow_copy

PAIRS = ("north", "south")

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


# On this one machine the two pairs share its CPUs by construction: each pair's cells
# and anchors run beside the other pair's servers, and are rightly flagged for it (up to
# "drift check FAILED: the anchor ran under interference", which fails the run). These
# tests are about who runs when and what is kept, so the copies they run leave
# interference unchecked; the quiet-run tests (test_workflow.py, test_cells_real.py)
# hold the flag to account.
UNCHECKED = {"interference": {"max_cpu_pressure_pct": None, "max_foreign_cpu_cores": None,
                              "max_steal_pct": None}}


# The example's short context only: each pair still runs two links, two blocks, anchors
# and concurrent cells, in half the time.
SHORT = {"short": 128}


def two_pairs(**changes) -> dict:
    """The two-pairs example with `changes`, interference unchecked (above)."""
    config = yaml.safe_load((ROOT / "config/examples/two-pairs.yaml").read_text())
    config.update(UNCHECKED, **changes)
    return config


def two_pairs_copy(tmp_path: Path, **changes) -> Path:
    """A workflow copy whose config/examples/two-pairs.yaml is `two_pairs(**changes)`."""
    work = workflow_copy(tmp_path)
    (work / "config/examples/two-pairs.yaml").write_text(
        yaml.safe_dump(two_pairs(**changes), sort_keys=False))
    return work


def start(cluster: Cluster, work: Path) -> subprocess.Popen:
    # Jobs of a minute or two: ask SLURM how they are doing every 5 s at first, not 40.
    return subprocess.Popen(
        [SNAKEMAKE, "--profile", "profiles/slurm", "all", "--configfile",
         "config/examples/two-pairs.yaml", "--replace-workflow-config",
         "--slurm-init-seconds-before-status-checks", "5"],
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


STAMP = re.compile(r"^splitbench: (\S+) (started|ended) at (\d+) ns on (\S+)$", re.M)


def job_times(work: Path) -> pd.DataFrame:
    """Every job on a pair's hardware, when it started and ended, from its own log (each
    such job stamps both: splitbench/cli.py)."""
    rows = []
    for log in (work / "results/logs").rglob("*.log"):
        stamps = {kind: int(ns) for _, kind, ns, _ in STAMP.findall(log.read_text())}
        if stamps:
            pair = log.relative_to(work / "results/logs").parts[1]
            assert set(stamps) == {"started", "ended"}, f"{log}: {stamps}"
            rows.append({"output": str(log), "pair": pair,
                         "stage": log.relative_to(work / "results/logs").parts[0],
                         "start": stamps["started"], "end": stamps["ended"]})
    return pd.DataFrame(rows)


def overlapping(times: pd.DataFrame) -> list[tuple[str, str]]:
    ordered = times.sort_values("start").to_dict("records")
    return [(a["output"], b["output"]) for a, b in zip(ordered, ordered[1:], strict=False)
            if b["start"] < a["end"]]


def assert_pairs_took_turns(work: Path, cells: int) -> None:
    """Each pair ran its link checks, launches, cells and anchors one at a time; the two
    pairs ran at the same time (from the start and end each job stamps in its log)."""
    times = job_times(work)
    for pair in PAIRS:
        mine = times[times["pair"] == pair]
        assert sorted(mine["stage"].value_counts().items()) == [
            ("anchors", 2), ("cells", cells), ("links", 2), ("servers", 2)], mine
        assert overlapping(mine) == [], f"{pair}: two of its jobs ran at once"
    assert overlapping(times), "the pairs never ran at the same time"


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


def our_namespaces() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in listed.splitlines()
            if line.split() and line.split()[0].startswith(tuple(f"sb-{p}-" for p in PAIRS))]


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


def test_two_pairs_run_side_by_side_one_job_at_a_time_each_on_its_node(cluster, tmp_path):
    work = two_pairs_copy(tmp_path, contexts=SHORT)
    code, out = run(cluster, work)
    assert code == 0, out[-4000:]

    # SLURM's records: one job per pair, on the pair's node, the two at the same time.
    jobs = [j for j in slurm_jobs(cluster) if j.get("WorkDir") == str(work)]
    assert sorted(j["NodeList"] for j in jobs) == sorted(PAIRS), jobs
    assert all(j["JobState"] == "COMPLETED" for j in jobs), jobs
    spans = [(pd.Timestamp(j["StartTime"]), pd.Timestamp(j["EndTime"])) for j in jobs]
    assert max(s for s, _ in spans) < min(e for _, e in spans), f"pairs ran apart: {spans}"

    # The jobs' own timestamps: within a pair, no two jobs overlapped; the pairs did.
    assert_pairs_took_turns(work, cells=4)

    # Every cell ran on the servers its block's launch started: none relaunched them.
    for pair in PAIRS:
        for cell in (work / "results/cells" / pair).rglob("ctx*_c*.parquet"):
            if cell.name.endswith(".requests.parquet"):
                continue
            link, model = cell.parts[-3], cell.parts[-2]
            launch = json.loads((work / "results/servers" / pair / link / model
                                 ).with_suffix(".json").read_text())
            own = pd.read_parquet(cell, columns=["launch_id", "reference"])
            own = own[~own["reference"].fillna(False).astype(bool)]
            assert set(own["launch_id"]) == {launch["launch_id"]}, cell

    # The pair jobs tore their pairs down before they ended.
    assert alive_servers(work) == []
    assert our_namespaces() == []

    # One report compares the pairs.
    table = (work / "results/tables/pairs.md").read_text()
    assert "north" in table and "south" in table and "one pair in this run" not in table
    report = (work / "results/report.html").read_text()
    for pair in PAIRS:
        assert f"sb-{pair}-a" in report or pair in report


def test_ctrl_c_leaves_no_server_or_namespace_behind(cluster, tmp_path):
    work = two_pairs_copy(tmp_path, contexts=SHORT)
    process = start(cluster, work)
    servers: list[dict] = []
    deadline = time.monotonic() + 600
    try:
        # Wait until both pairs' servers run and a cell has been measured.
        while time.monotonic() < deadline and process.poll() is None:
            servers = alive_servers(work)
            roles = {(r["key"].split("-")[1] if "-" in r["key"] else "", r["role"])
                     for r in servers}
            if (any(role == "llama-server" for _, role in roles)
                    and list((work / "results/cells").rglob("*.parquet"))
                    and len(our_namespaces()) == 4):
                break
            time.sleep(0.5)
        assert process.poll() is None, process.communicate()[0][-3000:]
        assert servers, "no server ran before the deadline"
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
    # SLURM ends the cancelled jobs; their reapers stop the servers and namespaces.
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


def test_a_failed_cell_keeps_the_pairs_measured_cells(cluster, tmp_path):
    work = two_pairs_copy(tmp_path, contexts=SHORT, concurrency=[1])
    # A job that fails outright, before it measures: its output folder cannot be made
    # (a file holds its name), as on a full or broken disk.
    broken = work / "results/cells/south/usb4/synth"
    broken.parent.mkdir(parents=True)
    broken.write_text("in the way")
    code, out = run(cluster, work)
    assert code != 0
    measured = work / "results/cells/south/baseline/synth/ctxshort_c1.parquet"
    assert measured.exists(), out[-3000:]
    assert (work / "results/servers/south/baseline/synth.json").exists()
    assert broken.read_text() == "in the way"
    # The other pair is not touched by it.
    assert (work / "results/cells/north/5gbe/synth/ctxshort_c1.parquet").exists()
    # Once the disk is mended, the next run plans the failed cell, not the ones measured.
    broken.unlink()
    plan = subprocess.run([SNAKEMAKE, "--profile", "profiles/slurm", "-n", "all",
                           "--configfile", "config/examples/two-pairs.yaml",
                           "--replace-workflow-config"], cwd=work, capture_output=True,
                          text=True, env={**os.environ, **cluster.env})
    planned = {path.strip(", ") for line in plan.stdout.splitlines()
               if line.strip().startswith("output:") for path in line.split()[1:]}
    assert "results/cells/south/usb4/synth/ctxshort_c1.parquet" in planned, plan.stdout
    assert "results/cells/south/baseline/synth/ctxshort_c1.parquet" not in planned
    assert our_namespaces() == []
