"""The launch stage's steps, shared by every backend (lifecycle.launch_block): a block
that cannot be launched is a failed record naming the first reason, and nothing is
started for it. The lab and real-server tests hold the rest: a link that failed its
verification (test_lab) and servers that die loading (test_cells_real)."""

from __future__ import annotations

from splitbench.backends import lifecycle

LINK = {"pair": "p", "link": "l", "mode": "embedded", "index": 1}


def test_the_backends_first_reason_is_the_blocks_and_nothing_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no results/: the link has no verification to fail
    started = []
    record = lifecycle.launch_block(
        LINK, {"slots": 1}, started.append, backend="x",
        reasons=[None, "pair p: toolchain failed: no llama-server", "pair p: second"])
    assert started == []
    assert record["status"] == "failed" and record["fingerprint"] is None
    assert record["error"] == "pair p: toolchain failed: no llama-server"
    assert (record["pair"], record["link"], record["backend"]) == ("p", "l", "x")
    assert record["settings"] == {"slots": 1}
