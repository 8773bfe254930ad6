"""Teardown stops a measuring job first, then a launch's front end before the workers
it calls, whatever the backend names them: the order comes from what a backend's
process is (`stops`), not from its role's name."""

from __future__ import annotations

from splitbench.infra import procs


def test_a_front_end_stops_before_its_workers_whichever_backend_started_them():
    records = [
        {"key": "w", "role": "vllm-rank1", "stops": "worker"},
        {"key": "x", "role": "something-unknown"},
        {"key": "r", "role": "relay"},
        {"key": "f", "role": "onetrip-front", "stops": "front"},
        {"key": "j", "role": "job"},
        {"key": "w2", "role": "rpc-server", "stops": "worker"},
        {"key": "f2", "role": "llama-server", "stops": "front"},
    ]
    order = [r["key"] for r in sorted(records, key=procs.stop_rank)]
    assert order == ["j", "f", "f2", "w", "w2", "r", "x"]
