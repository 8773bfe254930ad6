"""Service levels (analysis/service_levels.py): which requests meet `slo:`, each cell's
share and goodput, and per link and context the most streams that hold it."""

from __future__ import annotations

import pandas as pd
import pytest

from splitbench.analysis import service_levels
from splitbench.configuration import ConfigError, parsed
from tests.conftest import tiny_config
from tests.matrices import request
from tests.support import write_cell

SLO = {"ttft_ms": 500.0, "tokens_per_s": 20.0, "share_pct": 90.0}


def cell(conc: int, holds: bool | None, link: str = "usb4", status: str = "ok") -> dict:
    """One constructed cell's row of service_levels.table."""
    return {"pair": "lab", "link": link, "model": "m", "ctx": "5k", "conc": conc,
            "requests": 10, "met": 10 if holds else 6, "met_pct": 100.0 if holds else 60.0,
            "holds": bool(holds), "goodput_rps": 1.0, "status": status}


def test_a_request_meets_the_level_only_when_it_succeeded_within_every_target(tmp_path):
    rows = [request(0, [20.0] * 9, ttft_ms=100.0),   # 50 tok/s, 100 ms: meets
            request(1, [20.0] * 9, ttft_ms=900.0),   # too slow to its first token
            request(2, [80.0] * 9, ttft_ms=100.0),   # 12.5 tok/s: too slow a stream
            request(3, [20.0] * 9, ttft_ms=100.0, status="crash"),
            request(4, [20.0] * 9, ttft_ms=100.0, reference=True)]  # the baseline's
    for row in rows[:4]:
        row["reference"] = False
    path = write_cell(tmp_path, "usb4", "5k", 1, rows)
    (row,) = service_levels.table([path], SLO).to_dict("records")
    assert (row["requests"], row["met"], row["met_pct"], row["holds"]) == (4, 1, 25.0, False)
    assert row["goodput_rps"] > 0
    # What the slowest of the share would need: a failed request stays within nothing,
    # so 90% of four (the fourth) is unbounded; half of them stay within 20 ms a token.
    assert row["step_at_share_ms"] == float("inf") and row["share_pct"] == 90.0
    (half,) = service_levels.table([path], {**SLO, "share_pct": 50.0}).to_dict("records")
    assert half["step_at_share_ms"] == pytest.approx(20.0, rel=0.01)
    assert half["ttft_at_share_ms"] == pytest.approx(100.0, rel=0.01)
    assert half["tokens_per_s_target"] == 20.0 and half["step_at_share_se"] >= 0
    # No target set: no table.
    assert service_levels.table([path], {"share_pct": 90}).empty


def test_held_at_every_level_at_none_and_up_to_a_crash():
    assert service_levels.held_streams(pd.DataFrame([cell(1, True), cell(2, True),
                                                     cell(4, True)])) == \
        "holds all 4 measured streams"
    assert service_levels.held_streams(pd.DataFrame([cell(1, False), cell(2, False)])) == \
        "holds none (at 1 stream, 60% of requests meet it)"
    crashed = pd.DataFrame([cell(1, True), cell(2, True), cell(4, False, status="crash")])
    assert service_levels.held_streams(crashed) == "holds 2 streams (at 4 streams it ended crash)"
    # A level that holds above one that does not: the streams that hold are those below.
    gap = pd.DataFrame([cell(1, True), cell(2, False), cell(4, True)])
    assert service_levels.held_streams(gap) == \
        "holds 1 stream (at 2 streams, 60% of requests meet it)"


def test_the_finding_names_each_link_per_context_baseline_first():
    levels = pd.DataFrame([cell(1, True, "usb4"), cell(2, True, "usb4"), cell(4, False, "usb4"),
                           cell(1, True, "5gbe"), cell(2, True, "5gbe"), cell(4, True, "5gbe")])
    ((ctx, found),) = service_levels.findings(levels, ["short", "5k"], SLO, "m", "5gbe")
    assert ctx == "5k"
    assert found.text == ("**At 5k, within 500 ms to first token and 20 tokens/s per stream "
                          "for 90% of requests: 5gbe holds all 4 measured streams and usb4 "
                          "holds 2 streams (at 4 streams, 60% of requests meet it)**.")


def test_a_service_level_out_of_bounds_is_refused_by_its_key():
    config = tiny_config()
    config["slo"] = {"ttft_ms": 500, "share_pct": 120}
    with pytest.raises(ConfigError, match="slo.share_pct"):
        parsed(config)
