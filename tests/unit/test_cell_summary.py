"""The summary from request files: medians over ok requests only, identity from the rows.
(The summary's dispersion, repeats and overlap are tested in test_tables.py.)"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from splitbench.contracts import results
from splitbench.summary import cell_summary
from tests.support import write_cell
from tests.support.matrices import CONTEXTS, request


def test_medians_are_over_ok_requests_only(tmp_path):
    rows = [request(i, [gap] * 4, send_ns=i * 10**9, ttft_ms=ttft, cell_status="timeout")
            for i, (gap, ttft) in enumerate([(10.0, 50.0), (11.0, 60.0), (12.0, 70.0)])]
    # A failed request's figures, however extreme, are not in the medians.
    rows.append(request(3, [900.0, 900.0], send_ns=4 * 10**9, ttft_ms=9000.0,
                        status="timeout", cell_status="timeout", n_predict=5))
    summary = cell_summary.summarize([write_cell(tmp_path, "a", "short", 1, rows)], CONTEXTS)
    row = summary.iloc[0]
    assert row["decode_ms_per_token"] == pytest.approx(11.0)
    assert row["ttft_ms"] == pytest.approx(60.0)
    assert row["prefill_tps"] == pytest.approx(128 / 0.060)
    assert row["status"] == "timeout"  # the cell's status is its worst request's


def test_identity_comes_from_the_rows_when_they_carry_it(tmp_path):
    path = write_cell(tmp_path, "a", "short", 1, [request(0, [10.0, 10.0])])
    rows = results.stamped(pd.read_parquet(path), {"pair": "q", "link": "k", "model": "n",
                                                    "ctx": "short", "conc": 1, "repeat": 0})
    moved = tmp_path / "moved.parquet"
    rows.to_parquet(moved)
    summary = cell_summary.summarize([str(moved)], CONTEXTS)
    assert summary.iloc[0][["pair", "link", "model", "ctx", "conc"]].tolist() == [
        "q", "k", "n", "short", 1]


def test_an_unreadable_cell_file_is_a_failed_cell_and_the_rest_is_summarized(tmp_path):
    good = write_cell(tmp_path, "a", "short", 1, [request(0, [10.0, 10.0])])
    cut = write_cell(tmp_path, "b", "short", 1, [request(0, [12.0, 12.0])])
    Path(cut).write_bytes(Path(cut).read_bytes()[:100])  # cut short, as by a full disk
    summary = cell_summary.summarize([good, cut], CONTEXTS).set_index("link")
    assert summary.loc["a", "status"] == "ok"
    assert summary.loc["a", "decode_ms_per_token"] == pytest.approx(10.0)
    assert summary.loc["b", "status"] == "error"
    assert pd.isna(summary.loc["b", "decode_ms_per_token"])
    rows = cell_summary.read_requests([cut], ["status", "error_type", "error_text"])
    assert rows.iloc[0]["error_type"] == "unreadable"
    assert "its request file cannot be read" in rows.iloc[0]["error_text"]


def test_a_run_whose_every_cell_failed_before_it_measured_is_summarized(tmp_path):
    """Host B unreachable: every cell is one launch failure, with none of a measured
    cell's columns (temperatures, interference), and the summary named them missing."""
    failed = {"request_id": 0, "status": "load", "error_type": "launch_failed",
              "error_text": "the block's launch failed: host B cannot be reached",
              "reference": False, "round": 0, "cell_status": "load", "generated_tokens": 0,
              "t_send_ns": 10**18, "t_first_ns": None, "t_last_ns": None,
              "t_end_ns": 10**18}
    files = [write_cell(tmp_path, link, "short", 1, [failed]) for link in ("a", "b")]
    summary = cell_summary.summarize(files, CONTEXTS)
    assert list(summary["status"]) == ["load", "load"]
    assert summary["temps"].isna().all()
    assert summary["interference_checked"].eq(False).all()


def test_a_request_whose_client_and_server_disagree_flags_its_cell(tmp_path):
    """The second witness inside the product: beyond metrics.WITNESS_BOUND a single-stream
    cell stamped when the client read its tokens is flagged by its worst request, naming
    the request and the late end."""
    agree = {"decode_vs_server": 0.0004, "first_token_late_ms": 0.0,
             "last_token_late_ms": 0.01}
    late_first = {"decode_vs_server": -0.061, "first_token_late_ms": 2.5,
                  "last_token_late_ms": 0.0}
    flagged = write_cell(tmp_path, "a", "short", 1, [
        request(0, [1.0] * 10, **late_first), request(1, [1.0] * 10, **agree)])
    quiet = write_cell(tmp_path, "b", "short", 1, [request(0, [1.0] * 10, **agree)])
    summary = cell_summary.summarize([flagged, quiet], CONTEXTS).set_index("link")
    assert summary.loc["a", "flags"] == (
        "client and server disagree on decode: request 0 -6.1% against the server's own "
        "(its first token reached the client 2.5 ms later than the others)")
    assert pd.isna(summary.loc["b", "flags"])


def test_a_cell_stamped_by_the_packet_clock_is_held_to_its_median_disagreement(tmp_path):
    """With each token stamped as its segment arrived, a request whose first token
    reached host A late was sent late by the server (a quiet 5k run: 8.1 ms after its
    prefill, one request of ten): the cell's median is the figure and it agrees, so the
    cell is not flagged; a median beyond the bound is."""
    def stamped(i: int, gap: float) -> dict:
        return request(i, [1.0] * 10, decode_vs_server=gap, arrival_clock="segment",
                       first_token_late_ms=8.1 if gap < -0.05 else 0.1)

    one_late = [stamped(i, g) for i, g in enumerate([-0.054, -0.001, -0.001, -0.002])]
    most_late = [stamped(i, g) for i, g in enumerate([-0.06, -0.07, -0.001, -0.08])]
    summary = cell_summary.summarize([write_cell(tmp_path, "a", "5k", 1, one_late),
                                      write_cell(tmp_path, "b", "5k", 1, most_late)],
                                     CONTEXTS).set_index("link")
    assert pd.isna(summary.loc["a", "flags"])
    assert summary.loc["b", "flags"] == ("client and server disagree on decode: the median "
                                         "request -6.5% against the server's own")


def test_a_concurrent_cell_is_held_to_its_median_disagreement(tmp_path):
    """Under concurrency one stream's first token can wait for another's prefill, which
    the server's timer does not count: one such request does not flag the cell, a
    median beyond the bound does."""
    one_late = [request(i, [1.0] * 10, decode_vs_server=g)
                for i, g in enumerate([-0.19, 0.001, -0.002, 0.0])]
    all_off = [request(i, [1.0] * 10, decode_vs_server=g)
               for i, g in enumerate([0.08, 0.07, 0.09, 0.06])]
    summary = cell_summary.summarize([write_cell(tmp_path, "a", "short", 4, one_late),
                                      write_cell(tmp_path, "b", "short", 4, all_off)],
                                     CONTEXTS).set_index("link")
    assert pd.isna(summary.loc["a", "flags"])
    assert summary.loc["b", "flags"] == ("client and server disagree on decode: the median "
                                         "request +7.5% against the server's own")
