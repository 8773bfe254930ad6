"""Re-running part of a matrix: what a change to the config, the code or the results
plans against the finished tiny run, and a drift re-measure that resumes after a kill."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import ROOT, needs_root
from tests.support import namespaces, procs_left, run_copy
from tests.support.workflow_run import (
    SNAKEMAKE,
    cells_in,
    planned,
    snakemake,
    undeclared,
)


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_re_verifying_a_link_re_measures_nothing(finished):
    """A link's result is an `ancient` input of its launches and cells: verifying it again
    re-builds the tables from the new figures and measures nothing."""
    work, config = finished
    jobs = planned(work, config, "--forcerun", "results/links/t/slow.parquet")
    assert jobs["link"] == ["results/links/t/slow.parquet"]
    assert not {"cell", "launch", "anchor", "roundtrips", "model_file"} & set(jobs), jobs
    # The link comparison and the tables show the new verification; the cells'
    # summary reads no link and stays.
    assert {"link_comparison", "tables"} <= set(jobs) and "aggregate" not in jobs, jobs


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_round_trip_sweep_runs_through_the_workflow(finished, tmp_path):
    """The sweep's rules for real, in a copy of the tiny run with a sweep added to its
    config: links at two added delays, a launch at each, the fit and its table, every
    file it writes declared, and nothing left running."""
    work, config = finished
    work = run_copy(work, tmp_path)
    sweep = {**config, "roundtrips": {"models": ["tiny"], "workers": [1],
                                      "delays_ms": [0.0, 2.0], "requests": 2,
                                      "prompt_tokens": 16, "n_predict": 16,
                                      "rr_samples": 40}}
    (work / "config/config.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    run = snakemake(work, "results/roundtrips/t/tiny/w1.parquet",
                    "results/tables/round_trips.csv")
    assert run.returncode == 0, run.stderr[-3000:]
    assert undeclared(work) == []
    rows = pd.read_parquet(work / "results/roundtrips/t/tiny/w1.parquet")
    assert sorted(rows["delay_ms"].unique()) == [0.0, 2.0]
    assert rows["error"].isna().all() and rows["launch_id"].nunique() == 2
    # 2 ms each way: the measured latency grows by at least the 4 ms round trip.
    latency = rows.groupby("delay_ms")["rr_ms"].first()
    assert latency[2.0] - latency[0.0] >= 3.2
    table = pd.read_csv(work / "results/tables/round_trips.csv").iloc[0]
    assert table["points"] == 2 and table["round trips per token"] > 0
    assert not procs_left(work)


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_adding_a_model_plans_only_its_cells(finished):
    work, config = finished
    grown = copy.deepcopy(config)
    grown["models"]["tiny3"] = {**config["models"]["tiny"], "synthetic": {
        **config["models"]["tiny"]["synthetic"], "seed": 9}}
    jobs = planned(work, grown)
    assert len(cells_in(jobs)) == 8
    assert all("/tiny3/" in path for path in cells_in(jobs))
    assert "link" not in jobs and "toolchain" not in jobs
    assert len(jobs["launch"]) == 2 and len(jobs["anchor"]) == 2


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("grow", ["context", "concurrency"])
def test_a_longer_context_or_more_concurrency_plans_new_cells_and_resized_launches(
        finished, grow):
    work, config = finished
    grown = copy.deepcopy(config)
    if grow == "context":
        grown["contexts"]["long"] = 1200
    else:
        grown["concurrency"] = [1, 2, 3]
    jobs = planned(work, grown)
    new = {c for c in cells_in(jobs)}
    assert len(new) == 8
    assert all(("ctxlong_" in c) if grow == "context" else c.endswith("_c3.parquet")
               for c in new)
    # Every launch is re-sized (its slots or context grew) before the new cells run.
    assert len(jobs["launch"]) == 4
    assert "link" not in jobs


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_adding_a_link_plans_only_its_verification_launches_and_cells(finished):
    work, config = finished
    grown = copy.deepcopy(config)
    links = grown["pairs"]["t"]["links"]
    grown["pairs"]["t"]["links"] = {"mid": {"rate_gbit": 0.8}, **links}  # first, even
    jobs = planned(work, grown)
    assert jobs["link"] == ["results/links/t/mid.parquet"]
    assert len(jobs["launch"]) == 2
    assert len(cells_in(jobs)) == 8 and all("/mid/" in c for c in cells_in(jobs))


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("change", [{"threads": 2}, {"server_args": ["--no-mmap"]},
                                    {"worker_args": ["-c"]}])
def test_changing_one_models_settings_plans_only_its_cells(finished, change):
    work, config = finished
    changed = copy.deepcopy(config)
    changed["models"]["tiny2"].update(change)
    jobs = planned(work, changed)
    assert len(cells_in(jobs)) == 8
    assert all("/tiny2/" in path for path in cells_in(jobs))
    assert sorted(jobs.get("launch", [])) == [
        "results/servers/t/plain/tiny2.json", "results/servers/t/slow/tiny2.json"]


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_editing_package_code_plans_nothing(finished, tmp_path):
    """The package's code is no rule's code: editing the cell's measurement, the
    planning and the client (in a copy of the package beside the run, which the workflow
    and its jobs import first) plans nothing."""
    work = run_copy(finished[0], tmp_path)
    package = work / "splitbench"
    shutil.copytree(ROOT / "splitbench", package)
    for module in ("cells/measure.py", "matrix/plan.py", "backends/client.py"):
        assert (package / module).is_file(), module  # an edit, not a new file
        with open(package / module, "a") as handle:
            handle.write("\n# an edit that changes no measurement\n")
    result = snakemake(work, "all", "-n")
    assert "Nothing to be done" in result.stdout + result.stderr, result.stdout[-2000:]


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_forcing_one_cell_or_a_pattern_plans_exactly_those(finished):
    work, config = finished
    one = "results/cells/t/slow/tiny/ctxmid_c2.parquet"
    assert cells_in(planned(work, config, "--forcerun", one)) == {one}
    listed = subprocess.run(
        [sys.executable, "-m", "splitbench", "cells", "--match", "link=slow,model=tiny2"],
        cwd=work, capture_output=True, text=True, check=True).stdout.split()
    assert len(listed) == 4
    assert cells_in(planned(work, config, "--forcerun", *listed)) == set(listed)


def kill_mid_cell(work: Path, cell_log: Path) -> int:
    """Start `snakemake all` and kill it (kill -9) once the cell whose log is `cell_log`
    has sent its first release's requests (the log counts releases from 1); when, in
    ns."""
    cell_log.unlink(missing_ok=True)
    run = subprocess.Popen([SNAKEMAKE, "--cores", "1", "all"], cwd=work,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and run.poll() is None:
        if cell_log.exists() and "release 1, sending" in cell_log.read_text():
            break
        time.sleep(0.02)
    assert cell_log.exists() and "release 1, sending" in cell_log.read_text(), \
        "the cell never sent its requests"
    killed_ns = time.time_ns()
    run.kill()
    run.wait()
    return killed_ns


@needs_root()
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_drift_apply_remeasures_the_flagged_cells_and_a_killed_rerun_resumes(finished,
                                                                              tmp_path):
    """`drift --apply` on two cells plans exactly those; the rerun, killed mid-cell,
    leaves nothing running and resumes with only what it had not measured; each flagged
    cell's earlier measurement is archived, nothing else is measured again. (In a copy
    of the tiny run: the other tests read it as it finished.)"""
    work, config = finished
    work = run_copy(work, tmp_path)
    flagged = [("t", "plain", "tiny", "short", 2), ("t", "slow", "tiny2", "mid", 1)]
    report = pd.DataFrame([dict(zip(["pair", "link", "model", "ctx", "conc"], cell,
                                    strict=True), kind="rise", reason="test: rose 12 C")
                           for cell in flagged])
    report.to_parquet(work / "flagged.parquet")
    subprocess.run([sys.executable, "-m", "splitbench", "drift", "--apply", "--report",
                    "flagged.parquet"], cwd=work, check=True, capture_output=True)
    paths = {f"results/cells/{p}/{link}/{m}/ctx{ctx}_c{conc}.parquet"
             for p, link, m, ctx, conc in flagged}
    assert cells_in(planned(work, config)) == paths
    before = {p: pd.read_parquet(work / p.replace(".parquet", ".requests.parquet"))
              for p in paths}
    untouched = work / "results/cells/t/plain/tiny/ctxshort_c1.parquet"
    untouched_mtime = untouched.stat().st_mtime_ns
    locks = work / ".snakemake/locks"
    locks.mkdir(parents=True, exist_ok=True)
    foreign = locks / "7.output.lock"  # another Snakemake's, on files this run never uses
    foreign.write_text("elsewhere/other.txt\n")

    # The concurrent flagged cell is where the rerun is killed.
    target = "results/cells/t/plain/tiny/ctxshort_c2.parquet"
    rerun_ns = time.time_ns()
    killed_ns = kill_mid_cell(work, work / "results/logs/cells/t/plain/tiny/ctxshort_c2.log")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (namespaces("sb-t-") or procs_left(work)
                                           or len(list(locks.glob("*.lock"))) > 1):
        time.sleep(0.5)
    assert not namespaces("sb-t-")  # the reaper tore the killed run down
    assert not procs_left(work)
    assert not list((work / ".splitbench/procs").glob("*.json"))  # jobs and servers
    # It removed the killed run's directory locks and left the other run's alone.
    assert [p.name for p in locks.glob("*.lock")] == [foreign.name]
    foreign.unlink()
    # Whether the killed job wrote its cell before the reaper ended it decides whether the
    # resume re-runs the end anchor (Jobs.anchor_inputs): a missing cell is "updated by
    # another job" even for an ancient input.
    end_anchor = "results/anchors/t/tiny/end.parquet"
    anchor_again = not (work / target).exists()

    resumed = snakemake(work, "all")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # Re-measured: the killed cell's every request after the kill (whatever the killed
    # run's job wrote before the reaper ended it, Snakemake counts it incomplete); the
    # flagged cells and nothing else since the rerun began.
    requests = pd.read_parquet(work / target.replace(".parquet", ".requests.parquet"))
    assert (requests["status"] == "ok").all()
    assert requests["t_send_ns"].min() > killed_ns
    assert untouched.stat().st_mtime_ns == untouched_mtime
    measured_again = {str(p.relative_to(work)).replace(".requests", "")
                      for p in (work / "results/cells").rglob("*.requests.parquet")
                      if p.stat().st_mtime_ns > rerun_ns}
    assert measured_again == paths
    # Each flagged cell's earlier measurement is in the archive, as it was, and only
    # theirs. The killed cell's job outlives Snakemake until the reaper ends it: when it
    # finished its measurement first, the resumed run archived that one too (nothing
    # measured is lost).
    archived: dict[str, list[list[int]]] = {}
    for path in sorted((work / "results/archive").rglob("*.requests.parquet")):
        cell = "results/" + str(path.relative_to(work / "results")).split("/", 2)[2]
        archived.setdefault(cell.replace(".requests", ""), []).append(
            pd.read_parquet(path)["t_send_ns"].tolist())
    assert set(archived) == paths | ({end_anchor} if anchor_again else set()), \
        (anchor_again, archived.keys())
    archived.pop(end_anchor, None)
    for cell, olds in archived.items():
        assert before[cell]["t_send_ns"].tolist() in olds
        new = pd.read_parquet(work / cell.replace(".parquet", ".requests.parquet"))
        assert new["t_send_ns"].min() > max(max(old) for old in olds)
    # The table has a row for each archived measurement against the current one.
    table = (work / "results/tables/remeasured.md").read_text()
    assert table.count("| t |") == sum(len(olds) for olds in archived.values())
    assert "Nothing to be done" in snakemake(work, "all", "-n").stdout
