"""How long does Snakemake take to plan a big matrix spread over several pairs?

Writes a copy of the workflow with a config of `--pairs` embedded pairs, each with
`--links` links, `--models` synthetic models, `--contexts` contexts and `--concurrency`
levels (defaults: 4 x 5 x 5 x 10 x 5 = 5,000 cells), and times `snakemake -n` (the DAG
is built, nothing runs): the DAG alone, the listing of every job, and the DAG under
profiles/slurm. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/plan_scale.py [--pairs 4] [--links 5] [--models 5]
        [--contexts 10] [--concurrency 5] [--repeats 5] [--dir DIR]

Goal (issue 13): a 5,000-cell matrix over several pairs planned in at most 10 s. Last, a
one-rule workflow with as many jobs is timed the same way: Snakemake's own floor on this
machine today (3.2-3.5 s for 5,180 jobs on the development VM on a quiet day, 6.3-6.9 s
under steal), which the goal must leave room above. Figures: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def matrix(pairs: int, links: int, models: int, contexts: int, levels: int) -> dict:
    base = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    model = base["models"]["synth"]
    return {
        **{k: base[k] for k in ("measurement_version", "toolchain", "drift")},
        "cell": {k: v for k, v in base["cell"].items() if k != "paired"},
        "pairs": {f"p{p}": {"mode": "embedded", "hosts": {"a": {}, "b": {}},
                            "links": {f"l{k}": {"index": k + 1, "delay_ms": 0.1 * k}
                                      for k in range(links)}}
                  for p in range(pairs)},
        "baseline_link": "l0",
        "models": {f"m{m}": {**model, "synthetic": {**model["synthetic"], "seed": m}}
                   for m in range(models)},
        "contexts": {f"c{c}": 64 * (c + 1) for c in range(contexts)},
        "concurrency": list(range(1, levels + 1)),
    }


def workflow(where: Path, config: dict) -> Path:
    for name in ("Snakefile", "rules", "profiles", "envs", "report", "config"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, where / name, dirs_exist_ok=True)
        else:
            shutil.copy(source, where / name)
    (where / "config/reruns.yaml").unlink(missing_ok=True)
    (where / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return where


# What is timed: building the DAG alone (`-n --quiet rules progress`: Snakemake stops
# once it has the DAG), the dry run that also lists every job (`-n`), and the DAG as
# the SLURM profile plans it (cluster resources and the pairs' groups). Each `--repeats`
# times: this machine's speed drifts by tens of percent, so median and range are printed.
CASES = {
    "DAG (snakemake -n --quiet rules progress)": ["-n", "--quiet", "rules", "progress"],
    "listing every job (snakemake -n)": ["-n", "--quiet", "rules"],
    "DAG, --profile profiles/slurm": ["-n", "--quiet", "rules", "progress", "--profile",
                                      "profiles/slurm"],
}


def floor(where: Path, jobs: int) -> Path:
    """A one-rule workflow with as many jobs (each one output, all in `all`): what
    Snakemake itself takes to plan that many jobs on this machine today. The goal's
    margin over it is what splitbench's rules may spend."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "Snakefile").write_text(
        f'rule all:\n    input: expand("out/{{i}}.txt", i=range({jobs - 1}))\n\n'
        'rule one:\n    output: "out/{i}.txt"\n    shell: "touch {output}"\n')
    return where


def timed(where: Path, argv: list[str]) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run([SNAKEMAKE, *argv], cwd=where, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"snakemake {' '.join(argv)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    jobs = next((line.split()[-1] for line in (done.stdout + done.stderr).splitlines()
                 if line.startswith("total")), "?")
    return seconds, jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--links", type=int, default=5)
    parser.add_argument("--models", type=int, default=5)
    parser.add_argument("--contexts", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", help="keep the workflow copy here")
    args = parser.parse_args()
    config = matrix(args.pairs, args.links, args.models, args.contexts, args.concurrency)
    cells = args.pairs * args.links * args.models * args.contexts * args.concurrency
    where = Path(args.dir or tempfile.mkdtemp(prefix="sb-plan-"))
    where.mkdir(parents=True, exist_ok=True)
    workflow(where, config)
    print(f"{cells:,} cells over {args.pairs} pairs, {args.repeats} runs each (wall time):")
    total = None  # the job count, from the listing
    for name, argv in CASES.items():
        runs = [timed(where, argv) for _ in range(args.repeats)]
        seconds = sorted(s for s, _ in runs)
        # Quiet runs print no job counts; the listing does.
        jobs = f"{runs[0][1]} jobs, " if runs[0][1] != "?" else ""
        print(f"  {name}: {jobs}median {statistics.median(seconds):.1f} s "
              f"(min {seconds[0]:.1f}, max {seconds[-1]:.1f})")
        if runs[0][1] != "?":
            total = int(runs[0][1])
    if total is None:
        sys.exit("the listing printed no job count: no floor to compare with")
    # The same number of trivial jobs: Snakemake's own planning time on this machine now.
    trivial = floor(where / "floor", total)
    seconds = sorted(timed(trivial, CASES["DAG (snakemake -n --quiet rules progress)"]
                           + ["--cores", "1"])[0] for _ in range(args.repeats))
    print(f"  a one-rule workflow of {total:,} jobs (Snakemake's floor today): median "
          f"{statistics.median(seconds):.1f} s (min {seconds[0]:.1f}, max {seconds[-1]:.1f})")
    if not args.dir:
        shutil.rmtree(where)


if __name__ == "__main__":
    main()
