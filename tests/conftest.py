from __future__ import annotations

import os
from pathlib import Path

import pytest

from splitbench.infra import procs

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """A private run-state directory; everything recorded in it is torn down after."""
    path = tmp_path / "state"
    monkeypatch.setenv("SPLITBENCH_STATE", str(path))
    yield path
    procs.teardown()


def needs_root():
    return pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")
