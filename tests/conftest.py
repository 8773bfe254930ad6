from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from splitbench.infra import teardown
from tests.skips import (  # noqa: F401  (hooks: skips fail where nothing may skip)
    pytest_make_collect_report,
    pytest_runtest_makereport,
    pytest_terminal_summary,
)

ROOT = Path(__file__).resolve().parent.parent


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
    a SLURM cluster), which fails the run under CI=true (tests/skips.py)."""
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
