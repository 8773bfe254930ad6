"""`python -m splitbench doctor --configfile my-pairs.yaml`: is each pair ready to run?

One line per requirement and pair, before anything is started or changed: ✓ when it
holds, ✗ with what to do when it does not, · for what is only worth knowing (an optional
right, the clocks, the matrix's length). Exits 1 on any ✗. The checks are the ones the
run itself makes later, asked now: a run that would fail at a pair's toolchain or link
says so here first, naming host, tool, interface or key.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from splitbench import backends, pairs
from splitbench.configuration import Config, Pair
from splitbench.contracts import results
from splitbench.infra import files
from splitbench.links import readiness
from splitbench.links.readiness import BAD, NOTE, OK, Line
from splitbench.matrix import plan

# Free space the results of a run need (Parquet, logs, charts; a few hundred MB at most).
DISK_MIN_GIB = 1.0


def check(config: Config, results_dir: str | Path = "results") -> list[Line]:
    """Every pair's lines, then the run's own (disk, the matrix's length)."""
    lines = []
    for pair, spec in config.pairs.items():
        lines += pair_lines(config, pair, spec)
    lines += run_lines(config, results_dir)
    return lines


def before_run(config: Config, on_cluster: bool,
               results_dir: str | Path = "results") -> list[Line]:
    """What `snakemake all` does first, before any job: every pair's lines, printed and
    kept in results/doctor.txt. A ✗ does not stop the run: what it names fails (or falls
    back, as the line says) at its own job, as a result in the tables, while the rest is
    measured; the ✗ and its fix come now rather than minutes later. On a cluster a pair's
    hosts are its nodes, not this one, so only the run's own lines (disk, the matrix) are
    checked here."""
    try:
        lines = run_lines(config, results_dir) if on_cluster else check(config, results_dir)
    except Exception as exc:  # the doctor's own fault must not cost the run: say it
        lines = [Line(BAD, "doctor", f"the checks themselves failed: "
                                     f"{type(exc).__name__}: {exc}")]
    bad = sum(line.mark == BAD for line in lines)
    said = ["splitbench doctor, before anything starts "
            "(python -m splitbench doctor for these alone):",
            *map(str, lines)]
    if on_cluster:
        said.append(f"{NOTE} pairs: their hosts are cluster nodes, not this machine: run "
                    "python -m splitbench doctor on each pair's host A")
    said.append(f"splitbench doctor: {bad} problem(s) above; the run goes on, and each one "
                "shows where it bites, as a result (Ctrl-C now to fix them first)"
                if bad else "splitbench doctor: ready")
    text = "\n".join(said) + "\n"
    print(text, end="", flush=True)
    files.write_text(Path(results.under(Path(results_dir), results.DOCTOR)), text)
    return lines


def pair_lines(config: Config, pair: str, spec: Pair) -> list[Line]:
    """What the pair's kind asks of its hosts and links, then the toolchain of each
    backend the models use, where host B was reached."""
    lines = pairs.of(spec.mode).doctor_lines(config, pair, spec)
    if readiness.reached(lines):
        for backend in backends.used(config):
            lines += backend.doctor_lines(config, pair, spec)
    return lines


def run_lines(config: Config, results_dir: str | Path) -> list[Line]:
    from splitbench.matrix import estimate

    where = Path(results_dir)
    probe = where if where.exists() else Path.cwd()
    free = shutil.disk_usage(probe).free / 2**30
    lines = [Line(OK if free >= DISK_MIN_GIB else BAD, "run",
                  f"{free:.1f} GiB free for {where}/",
                  "" if free >= DISK_MIN_GIB else f"free at least {DISK_MIN_GIB:g} GiB")]
    cells = plan.cells(config)
    blocks = plan.blocks(config)
    summary = Path(results.under(where, results.SUMMARY))
    said = f"the matrix: {len(cells)} cells in {len(blocks)} blocks"
    if summary.exists():
        import pandas as pd

        table = pd.read_parquet(summary)
        speeds = estimate.speeds_from_summary(table)
        overheads = estimate.overheads_from(where, table)
        launch_s = (overheads.launch_s if "launch" in overheads.measured
                    else estimate.launch_seconds_from(where))
        try:
            minutes = estimate.expected_seconds(
                config, speeds, launch_s or estimate.LAUNCH_S, overheads)["total"] / 60
            said += (f", about {minutes:.0f} min at this workdir's last measured speeds"
                     + (f", launches of {launch_s:.0f} s" if launch_s else "")
                     + (f" and {overheads.job_s:.1f} s a job" if overheads.measured
                        else f" (its jobs' own time assumed: {estimate.JOB_OVERHEAD_S:.0f} s"
                             " each)"))
        except ValueError:
            said += " (no estimate: the last summary lacks some model or context)"
    else:
        said += " (no estimate before a first run measures the models' speeds)"
    lines.append(Line(NOTE, "run", said))
    return lines
