"""Which tests fail only sometimes, or only in some order?

Runs pytest `--runs` times on the suite or on a selection (every argument after `--` is
pytest's), each run in a new random order (pytest-randomly, a fresh seed per run), and
keeps each run's junit XML and output in `--dir` (default: a new temporary directory).
Prints, for each run, its seed, wall time, pytest's exit status and its passed, failed
and skipped counts; then each test that failed in at least one run, with failures/runs.
`--from DIR` prints the same from junit XML files already written (a CI's, or an earlier
run's). Exits 1 when any test failed in any run, or a run failed with no failed test
(pytest's exit status 2-5: interrupted, internal error, usage error, nothing collected).

    .venv/bin/python benchmarks/flakes.py [--runs 5] [--dir DIR] [-- PYTEST ARGS]
    .venv/bin/python benchmarks/flakes.py --runs 10 -- -m "not slow"
    .venv/bin/python benchmarks/flakes.py --from DIR

A failing run's order comes back with `pytest -p randomly --randomly-seed=SEED` and the
same arguments.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

# Written into each run's junit XML (<properties>) so that --from reads what the run knew.
SEED, WALL, EXIT = "flakes_randomly_seed", "flakes_wall_s", "flakes_pytest_exit"


@dataclass
class Run:
    """One pytest run as its junit XML tells it."""

    name: str
    seed: str = "?"
    wall_s: float | None = None
    exit_status: str = "?"
    passed: int = 0
    skipped: int = 0
    failed: set[str] = field(default_factory=set)


def run_pytest(number: int, seed: int, pytest_args: list[str], where: Path) -> Path:
    """One run of pytest in the order `seed` gives; its junit XML, with the seed, the
    wall time and pytest's exit status added as properties. Its output: run-N.log."""
    xml = where / f"run-{number:02d}-seed-{seed}.xml"
    argv = [sys.executable, "-m", "pytest", "-p", "randomly", f"--randomly-seed={seed}",
            f"--junitxml={xml}", *pytest_args]
    started = time.monotonic()
    with open(where / f"run-{number:02d}.log", "w") as log:
        status = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT).returncode
    wall_s = time.monotonic() - started
    # pytest writes no XML when it stops before running (a usage error): one says so.
    tree = ET.parse(xml) if xml.exists() else ET.ElementTree(ET.Element("testsuites"))
    suite = first_suite(tree.getroot())
    properties = suite.find("properties")
    if properties is None:
        properties = ET.Element("properties")
        suite.insert(0, properties)
    for name, value in ((SEED, seed), (WALL, f"{wall_s:.1f}"), (EXIT, status)):
        ET.SubElement(properties, "property", name=name, value=str(value))
    tree.write(xml, encoding="utf-8", xml_declaration=True)
    return xml


def first_suite(root: ET.Element) -> ET.Element:
    """The <testsuite> element (pytest writes one, inside <testsuites>); made if none."""
    if root.tag == "testsuite":
        return root
    suite = root.find("testsuite")
    return suite if suite is not None else ET.SubElement(root, "testsuite")


def read_run(xml: Path) -> Run:
    """A junit XML's counts and failed tests (a failure or an error: in set-up, call or
    teardown, or collecting a module). Seed, wall time and exit status where flakes.py
    wrote them; elsewhere the wall time is pytest's own (its session's)."""
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    run = Run(xml.name)
    own_time = 0.0
    for suite in suites:
        own_time += float(suite.get("time", 0))
        for prop in suite.iterfind("properties/property"):
            if prop.get("name") == SEED:
                run.seed = prop.get("value", "?")
            elif prop.get("name") == WALL:
                run.wall_s = float(prop.get("value", "nan"))
            elif prop.get("name") == EXIT:
                run.exit_status = prop.get("value", "?")
        for case in suite.iter("testcase"):
            test = f"{case.get('classname', '')}::{case.get('name', '')}"
            if case.find("failure") is not None or case.find("error") is not None:
                run.failed.add(test)
            elif case.find("skipped") is not None:
                run.skipped += 1
            else:
                run.passed += 1
    if run.wall_s is None:
        run.wall_s = own_time
    return run


def report(runs: list[Run]) -> int:
    """Prints the runs and the tests that failed; 1 if any test or run failed, else 0."""
    print(f"{'run':28} {'seed':>10} {'wall s':>8} {'exit':>5} {'passed':>7} {'failed':>7} "
          f"{'skipped':>8}")
    for run in runs:
        print(f"{run.name:28} {run.seed:>10} {run.wall_s:8.1f} {run.exit_status:>5} "
              f"{run.passed:7d} {len(run.failed):7d} {run.skipped:8d}")
    failures: dict[str, int] = {}
    for run in runs:
        for test in run.failed:
            failures[test] = failures.get(test, 0) + 1
    if not failures:
        print(f"no test failed in {len(runs)} runs")
    else:
        print(f"tests that failed (failures/runs), {len(failures)}:")
        for test, count in sorted(failures.items(), key=lambda item: (-item[1], item[0])):
            print(f"  {count}/{len(runs)}  {test}")
    # Exit 2-5 (interrupted, internal error, usage, nothing collected), or 1 with no
    # failed test in the XML: the run did not test what it was asked to.
    unexplained = [f"{run.name} (exit {run.exit_status})" for run in runs
                   if run.exit_status not in ("0", "?") and not run.failed]
    if unexplained:
        print(f"runs that failed with no failed test: {', '.join(unexplained)}")
    return 1 if failures or unexplained else 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        usage="%(prog)s [--runs N] [--dir DIR] [-- PYTEST ARGS] | --from DIR")
    parser.add_argument("--runs", type=int, default=5, help="how many runs (default 5)")
    parser.add_argument("--dir", type=Path,
                        help="write each run's junit XML and output here (default: a new "
                             "temporary directory)")
    parser.add_argument("--from", dest="read_from", type=Path, metavar="DIR",
                        help="run nothing: summarise the junit XML files (*.xml) in DIR")
    parser.add_argument("pytest_args", nargs="*", metavar="PYTEST ARGS",
                        help="pytest's arguments, after `--` (default: the whole suite)")
    args = parser.parse_args()
    if args.read_from:
        xmls = sorted(args.read_from.glob("*.xml"))
        if not xmls:
            sys.exit(f"no junit XML (*.xml) in {args.read_from}")
        sys.exit(report([read_run(xml) for xml in xmls]))
    where = args.dir or Path(tempfile.mkdtemp(prefix="splitbench-flakes-"))
    where.mkdir(parents=True, exist_ok=True)
    shown = " ".join(args.pytest_args) or "the whole suite"
    print(f"{args.runs} runs of pytest ({shown}), each in a new random order; junit XML "
          f"and output in {where}/")
    runs = []
    for number in range(1, args.runs + 1):
        seed = random.SystemRandom().getrandbits(32)
        runs.append(read_run(run_pytest(number, seed, args.pytest_args, where)))
        run = runs[-1]
        print(f"  run {number}: seed {seed}, {run.wall_s:.1f} s, {len(run.failed)} failed",
              flush=True)
    sys.exit(report(runs))


if __name__ == "__main__":
    main()
