"""Records written whole or not at all, and a torn one read as missing."""

from __future__ import annotations

import json

from splitbench.backends import lifecycle
from splitbench.infra import files


def test_a_record_is_replaced_whole_and_no_temporary_file_stays(tmp_path):
    path = tmp_path / "deep/record.json"
    files.write_json(path, {"a": 1})
    files.write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert [p.name for p in path.parent.iterdir()] == ["record.json"]


def test_a_torn_launch_record_reads_as_no_launch(tmp_path, monkeypatch):
    monkeypatch.setenv("SPLITBENCH_STATE", str(tmp_path))
    path = lifecycle.record_path("p")
    path.parent.mkdir(parents=True)
    path.write_text('{"url": "http://127.0.0.1:8080", "launch')
    assert files.read_json(path) is None
    assert lifecycle.current("p") is None
    assert files.read_json(tmp_path / "missing.json") is None


def test_a_writer_that_fails_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"old")
    try:
        with files.replacing(path) as tmp:
            tmp.write_bytes(b"half a ")
            raise ValueError("the sha256 is not the configured one")
    except ValueError:
        pass
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.gguf"]
    with files.replacing(path) as tmp:
        tmp.write_bytes(b"new")
    assert path.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["model.gguf"]
