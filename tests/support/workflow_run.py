"""The workflow in a scratch copy, driven as a user drives it, for the tests: the copy,
Snakemake on it, the tiny matrix, the plan of a dry-run, and the keys a file holds that
its type does not declare."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import yaml

from tests.conftest import ROOT, tiny_config

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
# Per run directory, every process the run had (`descendants_seen`): a flag that names
# one of them as another program's work would be the run's own work miscounted.
RUN_PROCESSES: dict[Path, set[int]] = {}


def workflow_copy(tmp_path: Path, config: dict | None = None) -> Path:
    """The workflow in a scratch directory, so its results/ never touch the checkout's."""
    work = tmp_path / "wf"
    work.mkdir()
    shutil.copy(ROOT / "Snakefile", work)
    for folder in ("rules", "config", "profiles", "envs", "report"):
        if (ROOT / folder).exists():
            shutil.copytree(ROOT / folder, work / folder)
    (work / "config/reruns.yaml").unlink(missing_ok=True)
    if config is not None:
        (work / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return work


def snakemake(work: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([SNAKEMAKE, "--cores", "1", *args], cwd=work, capture_output=True,
                          text=True, timeout=timeout)


# sockperf's timing of a link is checked by the tiny run (test_end_to_end_on_the_embedded_lab
# holds it against the project's probe). The other runs leave it out: about 8 s a link,
# and no assertion of theirs reads it.
NO_SOCKPERF = {"sockperf": False}


def tiny() -> dict:
    return tiny_config()


def planned(work: Path, config: dict, *args: str) -> dict[str, list[str]]:
    """Dry-run `all` with config: each pending rule's output files (first output)."""
    path = work / "config/config.yaml"
    original = path.read_text()
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    try:
        result = snakemake(work, "all", "-n", *args)
    finally:
        path.write_text(original)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs: dict[str, list[str]] = {}
    rule = None
    for line in result.stdout.splitlines():
        stripped = line.strip()
        if stripped.startswith(("rule ", "localrule ")) and stripped.endswith(":"):
            rule = stripped.split()[1].rstrip(":")
            jobs.setdefault(rule, [])
        elif stripped.startswith("output:") and rule:
            jobs[rule].append(stripped.split()[1].rstrip(","))
            rule = None
    return jobs


def cells_in(jobs: dict[str, list[str]]) -> set[str]:
    return set(jobs.get("cell", []))


def undeclared_keys(value: object, declared: type, where: str = "") -> list[str]:
    """Where a dict does not hold to its TypedDict (a key it does not declare, a required
    key it lacks, a value of another type), as the commands check their slices on entry
    (`splitbench.contracts.slice_check`): [] where it holds, else the first such place."""
    from splitbench.contracts import slice_check

    said = slice_check.problem(value, declared)
    return [f"{where}: {said}"] if said else []


def undeclared(work: Path, *args: str) -> list[str]:
    """Files under results/ that no job declares (as an output or a log), less those kept
    across re-runs on purpose (link history, the archive and its hard links, the
    aggregate's per-cell rows: a declared output is deleted before its job runs), the
    doctor's lines and the block order, which the run writes as it starts, before any
    job (the order is read when the jobs are planned: no job can make it)."""
    listed = snakemake(work, "--summary", *args)
    assert listed.returncode == 0, listed.stderr[-2000:]
    declared = set()
    for line in listed.stdout.splitlines()[1:]:
        fields = line.split("\t")
        declared |= {fields[0], *fields[3].split(",")} if len(fields) > 3 else {fields[0]}
    written = {str(p.relative_to(work)) for p in (work / "results").rglob("*") if p.is_file()}
    on_purpose = {p for p in written if p.endswith(".history.jsonl")
                  or "/.kept/" in p or "/archive/" in p
                  or p.startswith("results/summary/.memo/")} | {"results/doctor.txt",
                                                                "results/block_order.json"}
    return sorted(written - declared - on_purpose)


def _descendants(root: int) -> set[int]:
    """The living descendants of process `root` now (one pass over /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if entry.name.isdigit():
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo += children.get(pid, [])
    return found


@contextlib.contextmanager
def descendants_seen(every_s: float = 0.2) -> Iterator[set[int]]:
    """The processes this one starts inside the block (and theirs), looked for every
    `every_s` seconds: one that lives shorter may be missed."""
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(every_s):
            seen.update(_descendants(os.getpid()))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        done.set()
        watcher.join()

