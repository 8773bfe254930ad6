"""What a stopped launch removes on a real host: the /dev/shm files its own processes
mapped, each by its name, only regular files of this user; never a file whose name
merely looks like vLLM's, never a word split out of a name with a space in it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path

import pytest

from splitbench.backends import lifecycle
from splitbench.infra import leftovers, proc_stat, procs
from splitbench.infra.hosts import Host
from tests.conftest import needs_root

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
        leftover = {"host": asdict(Host("a")), "paths": [], "session": process.pid,
                    "session_start": proc_stat.start_time(process.pid)}
        seen = leftovers.shm_of(leftover)
        assert seen == [mapped], seen
        process.kill()
        process.wait()
        leftovers.remove_leftovers({**leftover, "shm": seen})
        assert not Path(mapped).exists()
        assert all(path.exists() for path in others)
        assert (tmp_path / "results").is_dir()
    finally:
        for path in others:
            path.unlink(missing_ok=True)


@pytest.fixture
def shm_names():
    """Fresh /dev/shm names for one test, each removed after it, whatever it is."""
    tag = uuid.uuid4().hex[:8]
    names = []

    def name(suffix: str) -> Path:
        names.append(Path(f"/dev/shm/psm_{tag}-{suffix}"))
        return names[-1]

    yield name
    for path in names:
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink(missing_ok=True)


def test_a_listed_name_that_is_not_a_regular_file_is_kept(shm_names, tmp_path):
    """Listed beside a file of the launch's own, which goes: a link (and the file it
    points to: a link in /dev/shm could point anywhere), a directory and a FIFO stay."""
    own = shm_names("own")
    own.write_text("the launch's")
    precious = tmp_path / "precious"
    precious.write_text("the user's")
    link = shm_names("link")
    link.symlink_to(precious)
    directory = shm_names("dir")
    directory.mkdir()
    fifo = shm_names("fifo")
    os.mkfifo(fifo)
    leftovers.remove_leftovers({"host": asdict(Host("a")),
                                "shm": [str(p) for p in (own, link, directory, fifo)]})
    assert not own.exists()
    assert link.is_symlink() and precious.read_text() == "the user's"
    assert directory.is_dir()
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


NOBODY = 65534  # an owner other than root


@needs_root()
def test_another_users_file_is_kept_even_when_listed(shm_names):
    """Root may delete anything: only its own files go, not a name another user made
    that the session was seen mapping."""
    own, foreign = shm_names("own"), shm_names("foreign")
    own.write_text("the launch's")
    foreign.write_text("another user's")
    os.chown(foreign, NOBODY, NOBODY)
    leftovers.remove_leftovers({"host": asdict(Host("a")),
                                "shm": [str(own), str(foreign)]})
    assert not own.exists()
    assert foreign.read_text() == "another user's" and foreign.stat().st_uid == NOBODY


@pytest.mark.parametrize("recorded", ["another start", "no start time"])
def test_a_session_led_by_another_process_than_the_recorded_one_maps_nothing(mapper,
                                                                            recorded):
    """The leader's pid is the live mapper's, but the record's start time is not its own
    (the rank ended and its pid was reused) or is unknown: that session is not ours."""
    process, mapped = mapper
    start = None if recorded == "no start time" else proc_stat.start_time(process.pid) - 1
    assert leftovers.shm_of({"host": asdict(Host("a")), "session": process.pid,
                             "session_start": start}) == []
    assert Path(mapped).exists()


def test_a_session_that_has_ended_maps_nothing():
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    time.sleep(0.1)
    assert leftovers.shm_of({"host": asdict(Host("a")),
                            "session": int(done.stdout)}) == []


def test_only_a_scratch_directorys_name_is_removed_recursively(tmp_path):
    """`paths` is read back from a record: only a name mktemp's template gives is
    `rm -rf`ed; the user's directory, and one reached through `..` from a scratch-like
    name, stay."""
    scratch = subprocess.run(["mktemp", "-d", leftovers.scratch_template("vllm")],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(scratch) / "socket-dir").mkdir()
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "work").write_text("the user's")
    through = f"{scratch}/../..{precious}"
    try:
        leftovers.remove_leftovers({"host": asdict(Host("a")),
                                    "paths": [str(precious), through, scratch]})
        assert not Path(scratch).exists()
        assert (precious / "work").read_text() == "the user's"
    finally:
        subprocess.run(["rm", "-rf", "--", scratch], check=False)


class PrintingHost:
    """A host whose login prints a banner before every command's output."""

    name = "b"

    def run(self, argv, **_):
        made = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        self.made = made.strip()
        return subprocess.CompletedProcess(argv, 0, f"Welcome to B\n{made}", "")


def test_a_backends_scratch_template_is_one_cleanup_may_remove_and_nothing_wider():
    assert leftovers.scratch_template("vllm") == "/tmp/sb-vllm-XXXXXXXX"
    assert leftovers.is_scratch("/tmp/sb-mybackend-Ab3dE5gH")
    for path in ("/tmp/sb-vllm-Ab3dE5g", "/tmp/sb-vllm-Ab3dE5gH/x", "/tmp/sb--Ab3dE5gH",
                 "/tmp/sb-vllm-../../home", "/home/sb-vllm-Ab3dE5gH"):
        assert not leftovers.is_scratch(path), path
    for name in ("../x", "", "Vllm", "a b"):
        with pytest.raises(ValueError, match="cannot name a scratch directory"):
            leftovers.scratch_template(name)


def test_a_scratch_path_not_of_the_template_fails_the_launch():
    from splitbench.backends.vllm import servers

    host = PrintingHost()
    try:
        with pytest.raises(lifecycle.LaunchError, match="host b: mktemp .* printed "
                           "'Welcome to B.*not a directory of that form"):
            servers._scratch(host)
    finally:
        Path(host.made).rmdir()


def test_teardown_stops_a_recorded_launch_and_removes_what_it_left(state_dir):
    """A launch on record when the run is torn down (Snakemake killed mid-run): its
    rank is stopped, its scratch directory and the /dev/shm file its session mapped are
    removed, and its record goes; another program's /dev/shm file stays."""
    from splitbench.infra import teardown

    name = f"psm_sbtest{uuid.uuid4().hex[:8]}"
    other = Path(f"/dev/shm/psm_{uuid.uuid4().hex[:8]}")
    other.write_text("not splitbench's")
    host = Host("a")
    scratch = host.run(["mktemp", "-d", leftovers.scratch_template("vllm")]).stdout.strip()
    rank = host.spawn([sys.executable, "-c", MAPPER, name], role="vllm-rank0",
                      key="vllm0-p", log_path=state_dir / "rank.log", extra={"group": True})
    mapped = Path(f"/dev/shm/{name}")
    try:
        deadline = time.monotonic() + 10
        while not mapped.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        lifecycle.save({"url": "http://127.0.0.1:1", "launch_id": "l", "fingerprint": "f",
                        "proc_keys": ["vllm0-p"],
                        "cleanup": [{"host": asdict(host), "paths": [scratch],
                                     "session": rank["pid"],
                                     "session_start": rank["start_time"]}]}, "p", "")
        done = teardown.teardown()
        assert f"stopped vllm-rank0 pid {rank['pid']}" in done, done
        assert "stopped launch p and removed what it left" in done, done
        assert proc_stat.start_time(rank["pid"]) is None or not procs.is_alive(rank)
        assert not Path(scratch).exists()
        assert not mapped.exists()
        assert lifecycle.current("p") is None
        assert other.read_text() == "not splitbench's"
    finally:
        other.unlink(missing_ok=True)
        mapped.unlink(missing_ok=True)
        subprocess.run(["rm", "-rf", "--", scratch], check=False)
