"""What a run's state directory lets other users do: nothing. It is made 0700, and a
record (or the directory) that another user owns is refused with its path and owner,
never acted on: teardown, perhaps as root, runs the undo commands records hold."""

from __future__ import annotations

import os
import stat

import pytest

from splitbench.backends import lifecycle
from splitbench.infra import procs, teardown
from tests.conftest import needs_root

NOBODY = 65534  # an owner other than root


def mode(path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_the_state_directory_and_its_record_folders_are_private(state_dir):
    procs.record_process({"pid": 1, "start_time": None, "role": "other", "key": "k"})
    assert mode(state_dir) == 0o700
    assert mode(state_dir / "procs") == 0o700


def test_a_state_directory_made_with_the_default_umask_is_narrowed(state_dir):
    (state_dir / "changes").mkdir(parents=True, mode=0o755)
    state_dir.chmod(0o755)
    assert procs.change("none") is None
    assert mode(state_dir) == 0o700
    assert mode(state_dir / "changes") == 0o700


def test_a_cluster_jobs_folder_and_the_runs_are_private(state_dir, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setattr(procs, "ensure_job_reaper", lambda: None)
    procs.record_namespace("sb-x")
    assert mode(state_dir) == 0o700
    assert mode(state_dir / "slurm-42") == 0o700
    procs.forget("netns", "sb-x")


@needs_root()
def test_another_users_change_record_is_refused_not_undone(state_dir, tmp_path):
    """A change record whose undo would create a file: owned by another user, teardown
    names it and its owner and runs nothing."""
    witness = tmp_path / "ran"
    procs.record_change("planted", "a", None, ["touch", str(witness)], gone_if="x")
    planted = state_dir / "changes" / "planted.json"
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(procs.StateError, match=f"{planted} belongs to .*uid {NOBODY}"):
        teardown.teardown()
    assert not witness.exists()
    os.chown(planted, 0, 0)  # the fixture's teardown may now undo it
    planted.unlink()


@needs_root()
def test_another_users_process_and_launch_records_are_refused(state_dir):
    procs.record_process({"pid": 1, "start_time": None, "role": "other", "key": "k"})
    os.chown(state_dir / "procs" / "k.json", NOBODY, NOBODY)
    with pytest.raises(procs.StateError, match="k.json belongs to"):
        procs.find("k")
    with pytest.raises(procs.StateError, match="k.json belongs to"):
        procs.all_procs()
    (state_dir / "procs" / "k.json").unlink()
    lifecycle.save({"url": "u", "launch_id": "i",
                    "fingerprint": "f", "proc_keys": []}, "p", "")
    os.chown(lifecycle.record_path("p"), NOBODY, NOBODY)
    with pytest.raises(procs.StateError, match="p.json belongs to"):
        lifecycle.current("p")
    lifecycle.record_path("p").unlink()


@needs_root()
def test_another_users_namespace_record_is_refused(state_dir):
    procs.record_namespace("sb-not-ours")
    os.chown(state_dir / "netns" / "sb-not-ours.json", NOBODY, NOBODY)
    with pytest.raises(procs.StateError, match="sb-not-ours.json belongs to"):
        procs.namespaces()
    (state_dir / "netns" / "sb-not-ours.json").unlink()


@needs_root()
def test_another_users_state_directory_is_refused(state_dir):
    state_dir.mkdir(mode=0o700)
    os.chown(state_dir, NOBODY, NOBODY)
    with pytest.raises(procs.StateError, match=f"{state_dir} belongs to"):
        procs.all_procs()
    assert mode(state_dir) == 0o700 and state_dir.stat().st_uid == NOBODY
    os.chown(state_dir, 0, 0)


def test_a_runs_guard_table_is_dropped_before_the_interface_changes_it_names(state_dir,
                                                                             tmp_path):
    """Two runs on one link share its address; each undoes it only where no other run's
    table names it. Each must drop its own table before it looks (else two runs ending
    at once each see the other's table and both leave the address behind): on a host,
    the table's record is undone before the interface changes, whatever their names."""
    said = tmp_path / "order"
    for key, state in [("interface-0a", {}), ("interface-ff", {}),
                       ("nft-99", {"table": "splitbench_1"}), ("other-00", {})]:
        procs.record_change(key, "a", None, ["sh", "-c", f"echo {key} >> {said}"],
                            gone_if="x", **state)
    done = teardown.teardown()
    assert said.read_text().split() == ["nft-99", "interface-0a", "interface-ff",
                                        "other-00"], done
    assert not list((state_dir / "changes").glob("*.json"))
