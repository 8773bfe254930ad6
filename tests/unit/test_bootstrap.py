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
TEST_ONLY = {"openssh-server", "chromium", "slurm-wlm", "munge"}


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


def test_llama_cpp_is_built_lean():
    args = re.search(r'^LLAMA_CMAKE_ARGS=.*$', BOOTSTRAP, re.M).group(0)
    assert "-DGGML_RPC=ON" in args
    assert "-DCMAKE_PROJECT_INCLUDE='$PWD/envs/llama-cpp-lean.cmake'" in args
    lean = (ROOT / "envs/llama-cpp-lean.cmake").read_text()
    assert "set(SPLITBENCH_TARGETS llama-server ggml-rpc-server)" in lean
