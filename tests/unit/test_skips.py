"""Under CI=true, root or not, a skipped test fails the run with its reason
(tests/support/skips.py); elsewhere a skip stays a skip."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT
from tests.support.skips import FORCE, PREFIX, skips_fail

SAMPLE = '''
import pytest

def test_passes():
    assert sum([1, 2]) == 3

@pytest.mark.skipif(True, reason="chromium not installed")
def test_marked_skip():
    pass

def test_skips_itself():
    pytest.skip("sshd not installed")

@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False
'''


# pytest in a process that is not root, whoever runs this test (os.geteuid and friends
# say 1000), with only this plugin: its own rootdir and no ini file, not this project's
# conftest.
AS_USER = ("import os, sys, pytest\n"
           "os.geteuid = os.getuid = lambda: 1000\n"
           "os.getresuid = lambda: (1000, 1000, 1000)\n"
           "sys.exit(pytest.main(sys.argv[1:]))\n")


def run_sample(tmp_path, **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", FORCE)}
    return subprocess.run([sys.executable, "-c", AS_USER, "-p", "tests.support.skips", "-p",
                           "no:cacheprovider", "-p", "no:randomly", "-rs", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, env={**environ, **env},
                          timeout=120)


def test_skips_fail_under_ci_whoever_runs_it_or_when_asked(monkeypatch):
    # Not root: CI=true alone decides (a CI without root must fail on the root tests).
    for name in ("geteuid", "getuid"):
        monkeypatch.setattr(os, name, lambda: 1000)
    assert skips_fail({"CI": "true"})
    assert not skips_fail({})
    assert not skips_fail({"CI": "1"})
    assert skips_fail({FORCE: "1"})
    assert not skips_fail({FORCE: "0"})


def test_a_skip_fails_the_run_with_its_reason(tmp_path):
    result = run_sample(tmp_path, **{FORCE: "1"})
    out = result.stdout
    assert result.returncode == 1, out
    # The marked skip fails in its set-up (an error), the one inside the test as a failure;
    # the passing test and the expected failure are untouched.
    assert "1 failed, 1 passed, 1 xfailed, 1 error" in out, out
    assert "skipped" not in out.splitlines()[-1], out
    assert f"{PREFIX}: chromium not installed" in out, out
    assert f"{PREFIX}: sshd not installed" in out, out
    summary = out[out.index("2 skip(s) that fail the run"):]
    assert "test_sample.py::test_marked_skip: chromium not installed" in summary, out
    assert "test_sample.py::test_skips_itself: sshd not installed" in summary, out


def test_under_ci_a_skip_fails_though_the_run_is_not_root(tmp_path):
    result = run_sample(tmp_path, CI="true")
    assert result.returncode == 1, result.stdout
    assert "1 failed, 1 passed, 1 xfailed, 1 error" in result.stdout, result.stdout
    assert f"{PREFIX}: sshd not installed" in result.stdout, result.stdout


def test_elsewhere_a_skip_stays_a_skip(tmp_path):
    result = run_sample(tmp_path)
    assert result.returncode == 0, result.stdout
    assert "1 passed, 2 skipped, 1 xfailed" in result.stdout, result.stdout
    assert "chromium not installed" in result.stdout  # -rs still says why
    assert PREFIX not in result.stdout


def test_a_module_that_skips_itself_fails_too(tmp_path):
    (tmp_path / "test_gone.py").write_text(
        "import pytest\npytest.importorskip('no_such_module_here')\n"
        "def test_never():\n    pass\n")
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", FORCE)}
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.support.skips", "-p",
                             "no:cacheprovider", str(tmp_path / "test_gone.py")],
                            capture_output=True, text=True, cwd=ROOT,
                            env={**environ, FORCE: "1"}, timeout=120)
    assert result.returncode != 0, result.stdout
    assert "could not import 'no_such_module_here'" in result.stdout, result.stdout
