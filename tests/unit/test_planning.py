"""splitbench.workflow.snakemake_internals: Snakemake's per-job repeats done once, with the
same conclusions; on a Snakemake minor release not tested, Snakemake's own behaviour."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import snakemake.api  # noqa: F401  (snakemake.dag first is a circular import)
from snakemake.dag import DAG

from splitbench.workflow import snakemake_internals as planning

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))

# first -> middle -> last, with first and last in group g, merged into one group job by
# --group-components (the check runs after that merge). With `middle` outside the group,
# the group depends on itself (it must wait for middle, which waits for the group).
WORKFLOW = """
from splitbench.workflow import snakemake_internals
snakemake_internals.check_each_group_once()

rule all:
    input: "last/0.txt"

rule first:
    output: "first/{i}.txt"
    group: "g"
    shell: "touch {output}"

rule middle:
    input: "first/{i}.txt"
    output: "middle/{i}.txt"
    group: config.get("middle_group", "")
    shell: "touch {output}"

rule last:
    input: "middle/{i}.txt"
    output: "last/{i}.txt"
    group: "g"
    shell: "touch {output}"
"""


def dry_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "Snakefile").write_text(WORKFLOW)
    return subprocess.run([SNAKEMAKE, "-n", "--cores", "1", "--group-components", "g=2",
                           *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_a_group_that_depends_on_itself_is_still_refused(tmp_path):
    refused = dry_run(tmp_path)
    assert refused.returncode != 0
    assert "Group g depends on itself" in refused.stdout + refused.stderr


def test_a_group_without_a_cycle_still_plans_as_one_group_job(tmp_path):
    planned = dry_run(tmp_path, "--config", "middle_group=g")
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert (planned.stdout + planned.stderr).count("Group job g") == 1


def test_each_group_is_checked_once_not_once_per_job(monkeypatch):
    seen: list[list[object]] = []

    class Group(list):
        __hash__ = object.__hash__

    monkeypatch.setattr(DAG, "_check_groups",
                        lambda dag: seen.append(list(dag._group.values())))
    planning.check_each_group_once()
    planning.check_each_group_once()  # a second call wraps nothing twice

    class Planned:
        pass

    dag = Planned()
    g, h = Group(["a", "b", "c"]), Group(["d", "e"])
    by_job = {"a": g, "b": g, "c": g, "d": h, "e": h}
    dag._group = by_job
    DAG._check_groups(dag)
    assert len(seen) == 1 and sorted(map(id, seen[0])) == sorted([id(g), id(h)])
    assert dag._group is by_job  # the DAG's own map is given back
