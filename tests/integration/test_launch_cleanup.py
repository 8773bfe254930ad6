"""What a stopped launch removes on a real host: the /dev/shm files its own processes
mapped, each by its name, only regular files of this user; never a file whose name
merely looks like vLLM's, never a word split out of a name with a space in it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path

import pytest

from splitbench.backends import lifecycle
from splitbench.infra.hosts import Host

# A process in a session of its own that creates a shared-memory file and maps it (as
# vLLM's ranks do), prints its path and waits.
MAPPER = """
import mmap, os, sys, time
path = "/dev/shm/" + sys.argv[1]
fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
os.ftruncate(fd, 4096)
block = mmap.mmap(fd, 4096)
print(path, flush=True)
time.sleep(120)
"""

@pytest.fixture
def mapper():
    name = f"psm_sbtest{uuid.uuid4().hex[:8]}"
    process = subprocess.Popen([sys.executable, "-c", MAPPER, name], stdout=subprocess.PIPE,
                               text=True, start_new_session=True)
    path = process.stdout.readline().strip()
    yield process, path
    process.kill()
    process.wait()
    Path(path).unlink(missing_ok=True)


def test_only_what_the_launchs_session_maps_is_removed(mapper, tmp_path, monkeypatch):
    process, mapped = mapper
    tag = uuid.uuid4().hex[:8]
    # Another program's files with vLLM-like names, one with a space whose second word
    # names a directory beside the workflow.
    others = [Path(f"/dev/shm/psm_{tag}"), Path(f"/dev/shm/psm_{tag} results")]
    for path in others:
        path.write_text("not splitbench's")
    (tmp_path / "results").mkdir()
    monkeypatch.chdir(tmp_path)
    try:
        leftover = {"host": asdict(Host("a")), "paths": [], "session": process.pid}
        seen = lifecycle.shm_of(leftover)
        assert seen == [mapped], seen
        # A name that is not its user's to delete is kept even when listed.
        foreign = Path(f"/dev/shm/psm_{tag}-foreign")
        foreign.write_text("another user's")
        if os.geteuid() == 0:
            os.chown(foreign, 65534, 65534)
        process.kill()
        process.wait()
        lifecycle.remove_leftovers({**leftover, "shm": [*seen, str(foreign)]})
        assert not Path(mapped).exists()
        assert all(path.exists() for path in others)
        assert (tmp_path / "results").is_dir()
        if os.geteuid() == 0:
            assert foreign.exists()
    finally:
        for path in [*others, Path(f"/dev/shm/psm_{tag}-foreign")]:
            path.unlink(missing_ok=True)


def test_a_session_that_has_ended_maps_nothing():
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    time.sleep(0.1)
    assert lifecycle.shm_of({"host": asdict(Host("a")),
                            "session": int(done.stdout)}) == []
