"""Under CI=true a skipped test is a failure, reported with its reason: a missing
chromium, sshd, sockperf or vLLM, or a CI that is not root, must not pass the run unseen.
Whoever runs CI=true, root or not: a CI without root fails on each root test's skip,
which says why. Loaded by tests/conftest.py; also a plugin of its own (`-p tests.support.skips`),
which is how tests/unit/test_skips.py runs it."""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest

# Set to 1 to make skips fail anywhere (the hook's own test does, as any user).
FORCE = "SPLITBENCH_SKIPS_FAIL"
PREFIX = "skipped where nothing may skip (CI=true)"

_failed = pytest.StashKey[list[str]]()


def skips_fail(environ: Mapping[str, str] = os.environ) -> bool:
    """True where a skip must fail the run: CI=true (as root or not), or
    SPLITBENCH_SKIPS_FAIL=1. Who runs it does not matter: a CI that cannot be root
    cannot run the root tests, and must say so by failing."""
    return environ.get(FORCE) == "1" or environ.get("CI") == "true"


def _reason(longrepr) -> str:
    # A skip's longrepr is (path, line, "Skipped: <reason>").
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def _fail(report, config: pytest.Config) -> None:
    reason = _reason(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"{PREFIX}: {reason}"
    config.stash.setdefault(_failed, []).append(f"{report.nodeid}: {reason}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and skips_fail():
        _fail(report, item.config)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """A module that skips itself as it is collected (importorskip) fails the same way."""
    report = yield
    if report.skipped and skips_fail():
        _fail(report, collector.config)
    return report


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    failed = config.stash.get(_failed, [])
    if failed:
        terminalreporter.section(f"{len(failed)} skip(s) that fail the run", sep="=", red=True)
        for line in failed:
            terminalreporter.line(line)
