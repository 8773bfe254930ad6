from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from splitbench.infra import teardown
from tests.support.skips import (  # noqa: F401  (hooks: skips fail where nothing may skip)
    pytest_make_collect_report,
    pytest_runtest_makereport,
    pytest_terminal_summary,
)

ROOT = Path(__file__).resolve().parent.parent


# The networks the tests' namespaces and hosts B are numbered from (and the embedded
# lab's, 10.213). For the session they are blackholed in this machine's own routing
# table: a connection to one of them before its veth is up (a set-up that asks host B
# too early did) fails here, at once, instead of leaving by the default route.
TEST_NETWORKS = ("10.213.0.0/16", "10.214.0.0/16", "10.250.0.0/15", "10.252.0.0/16")


@pytest.fixture(scope="session", autouse=True)
def test_addresses_stay_on_this_machine():
    if os.geteuid() != 0:  # no namespaces either: nothing of the kind is reached
        yield
        return
    added = [net for net in TEST_NETWORKS if subprocess.run(
        ["ip", "route", "add", "blackhole", net], capture_output=True).returncode == 0]
    yield
    for net in added:  # only what this session added (another may hold its own)
        subprocess.run(["ip", "route", "del", "blackhole", net], capture_output=True)


def tiny_config() -> dict:
    """tests/configs/tiny.yaml, freshly read (callers change it)."""
    return yaml.safe_load((ROOT / "tests/configs/tiny.yaml").read_text())


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """A private run-state directory; everything recorded in it is torn down after."""
    path = tmp_path / "state"
    monkeypatch.setenv("SPLITBENCH_STATE", str(path))
    yield path
    teardown.teardown()


def needs_root():
    """The `root` marker: skipped without root (network namespaces, packet capture, sshd,
    a SLURM cluster), which fails the run under CI=true (tests/support/skips.py)."""
    return pytest.mark.root


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("root") is not None and os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, packet capture, sshd or SLURM)")


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def ends_within(pid: int, seconds: float) -> bool:
    """The process has ended (or is a zombie) within `seconds`."""
    deadline = time.monotonic() + seconds
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not running(pid)
