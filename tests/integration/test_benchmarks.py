"""Every benchmark runs in a small mode, so that a rename in the package breaks a test,
not a user's benchmark run. The figures themselves are the benchmarks' business."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, needs_root

# script: (small arguments, text its output must hold, needs root)
SMALL = {
    "aggregate_scale.py": (["--tokens", "5000", "--models", "1"], "first build        aggregate",
                           False),
    "client_overhead.py": (["--streams", "1", "--rate", "500", "--tokens", "200",
                            "--results", "{tmp}"], "reader runs freely", False),
    # The relayed link only: each sockperf run starts with a 2 s warm-up.
    "probe_accuracy.py": (["--samples", "30", "--sockperf-seconds", "1", "--links", "delayed"],
                          "worst probe/sockperf p50 ratio", True),
    "bandwidth_term.py": (["--dry-run", "--dir", "{tmp}/wf"], "planned (dry run, exit 0)",
                          False),
    "plan_scale.py": (["--pairs", "2", "--links", "2", "--models", "1", "--contexts", "2",
                       "--concurrency", "2", "--repeats", "1"],
                      "listing every job (snakemake -n): 41 jobs, median", False),
    "flakes.py": (["--runs", "2", "--dir", "{tmp}/junit", "--", "tests/unit/test_constraints.py"],
                  "no test failed in 2 runs", False),
    "relay_timing.py": (["--repeats", "2", "--samples", "20"], "over 2 repeats", False),
    # Three runs of a one-model tiny matrix on the lab (about a minute each).
    "coverage.py": (["--runs", "3", "--config", "tests/configs/coverage-small.yaml",
                     "--work", "{tmp}/coverage"], "3 runs under", True),
}


def test_every_benchmark_has_a_small_mode():
    assert {p.name for p in (ROOT / "benchmarks").glob("*.py")} == set(SMALL)


# Slow, all of them: each runs a script whole (3-23 s here), the package's modules that
# they drive are the fast tier's; one that needs root measures on the namespace lab.
@pytest.mark.slow
@pytest.mark.parametrize("script", [
    pytest.param(s, marks=[needs_root()] if SMALL[s][2] else []) for s in sorted(SMALL)])
def test_a_benchmark_runs_in_its_small_mode(script, tmp_path):
    args, expected, _ = SMALL[script]
    if script == "probe_accuracy.py" and not shutil.which("sockperf"):
        pytest.skip("needs sockperf (./bootstrap.sh installs it as root)")
    argv = [sys.executable, str(ROOT / "benchmarks" / script),
            *(a.format(tmp=tmp_path) for a in args)]
    env = {**os.environ, "SPLITBENCH_STATE": str(tmp_path / "state")}
    before = set(Path("/tmp").glob("sb-*"))
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT,
                            env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert expected in result.stdout, result.stdout[-2000:]
    # It leaves nothing of its own in /tmp (a state folder made per run did, once).
    assert set(Path("/tmp").glob("sb-*")) <= before


@pytest.mark.slow
def test_flakes_counts_a_failing_test_in_every_run_and_a_passing_one_in_none(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "def test_always_fails():\n    assert 1 == 2\n\n"
        "def test_always_passes():\n    pass\n")
    flakes = [sys.executable, str(ROOT / "benchmarks/flakes.py")]
    for argv in ([*flakes, "--runs", "2", "--dir", str(tmp_path / "junit"), "--",
                  str(tmp_path / "test_sample.py")],
                 [*flakes, "--from", str(tmp_path / "junit")]):
        result = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                                cwd=tmp_path)
        assert result.returncode == 1, result.stdout + result.stderr
        failed = result.stdout[result.stdout.index("tests that failed"):]
        assert "2/2  test_sample::test_always_fails" in failed, result.stdout
        assert "test_always_passes" not in failed, result.stdout
