"""Percentiles per cell (summary/percentiles.py) and their table (report/tails.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from splitbench.contracts import results
from splitbench.report import tails
from splitbench.summary import percentiles
from tests.support import write_cell
from tests.support.matrices import request


def cell_with_tokens(root: Path, gaps: dict[int, list[float]], extra: list[dict] = (),
                     ttft_ms: float = 10.0) -> str:
    """A cell's requests and tokens files: each request's tokens `gaps[id]` ms apart."""
    rows = [request(rid, g, send_ns=rid * 10**9, ttft_ms=ttft_ms + rid, reference=False,
                    t_end_ns=rid * 10**9 + int((ttft_ms + rid + sum(g) + 0.5) * 1e6))
            for rid, g in gaps.items()]
    rows += list(extra)
    path = write_cell(root, "usb4", "short", 1, rows)
    tokens = []
    for row in rows:
        first = row["t_send_ns"] + int(row["ttft_ms"] * 1e6)
        steps = np.cumsum([0.0, *gaps.get(row["request_id"], [5.0, 5.0])]) * 1e6
        tokens += [{"request_id": row["request_id"], "token_index": i,
                    "t_ns": first + int(step)} for i, step in enumerate(steps)]
    pd.DataFrame(tokens).to_parquet(results.tokens_of(path))
    return path


def test_every_gap_of_the_cells_own_ok_requests_and_nothing_else(tmp_path):
    gaps = {0: [5.0, 6.0, 7.0], 1: [5.5, 30.0], 2: [6.0, 6.0, 6.0, 6.0]}
    # A failed request and the paired reference's request: neither is the cell's tail.
    failed = request(7, [900.0], status="crash")
    reference = request(8, [800.0], reference=True)
    path = cell_with_tokens(tmp_path, gaps, [failed, reference])
    dist = percentiles.table([path]).set_index("metric")
    every = np.concatenate([np.array(g) for g in gaps.values()])
    itl = dist.loc["inter_token_latency_ms"]
    assert itl["count"] == every.size == 9
    assert itl["p50"] == pytest.approx(np.percentile(every, 50))
    assert itl["p99"] == pytest.approx(np.percentile(every, 99))
    assert itl["max"] == pytest.approx(30.0) and itl["mean"] == pytest.approx(every.mean())
    # Nine gaps: no value lies beyond their p99, and the table says so.
    assert itl["p99_too_few"] and pd.isna(itl["p99_se"])
    ttft = dist.loc["time_to_first_token_ms"]
    assert ttft["count"] == 3 and ttft["p50"] == pytest.approx(11.0)
    latency = dist.loc["request_latency_ms"]
    assert latency["max"] == pytest.approx(11.0 + 35.5 + 0.5)  # request 1: its end
    assert set(dist["ctx"]) == {"short"} and set(dist["link"]) == {"usb4"}


def test_a_p99_from_enough_gaps_has_a_bootstrap_uncertainty_over_requests(tmp_path):
    rng = np.random.default_rng(1)
    gaps = {rid: list(5.0 + rng.exponential(0.5, 30)) for rid in range(8)}
    dist = percentiles.table([cell_with_tokens(tmp_path, gaps)]).set_index("metric")
    itl = dist.loc["inter_token_latency_ms"]
    assert itl["count"] == 240 and not itl["p99_too_few"]
    assert 0 < itl["p99_se"] < 2.0
    # The same data, the same figure: the bootstrap is seeded.
    again = percentiles.table([cell_with_tokens(tmp_path / "again", gaps)])
    assert again.set_index("metric").loc["inter_token_latency_ms", "p99_se"] == itl["p99_se"]


def test_a_cell_with_no_ok_request_has_no_row(tmp_path):
    path = cell_with_tokens(tmp_path, {}, [request(0, [5.0], status="crash")])
    assert percentiles.table([path]).empty
    assert tails.table(percentiles.table([path]), ["short"]).iloc[0, 0] == \
        "no cell has ok requests"


def test_the_table_shows_each_p99_with_its_plus_minus_or_as_too_few(tmp_path):
    rng = np.random.default_rng(2)
    many = {rid: list(5.0 + rng.exponential(0.5, 30)) for rid in range(8)}
    dist = percentiles.table([cell_with_tokens(tmp_path, many)])
    row = tails.table(dist, ["short"]).iloc[0]
    itl = dist.set_index("metric").loc["inter_token_latency_ms"]
    assert row["ITL (ms) p50"] == f"{itl['p50']:.2f}"
    assert row["ITL (ms) p99"] == f"{itl['p99']:.2f} ±{1.96 * itl['p99_se']:.2f}"
    assert row["TTFT (ms) p99"].endswith("(n=8: too few)")
    assert list(row.index[:4]) == ["model", "link", "ctx", "conc"]


@pytest.mark.parametrize("method", ["linear", "inverted_cdf"])
def test_all_resamples_at_once_are_the_resamples_one_by_one(method):
    """The bootstrap weighs every value by how often its request was drawn instead of
    concatenating each resample: the same draws, the same quantiles as np.percentile
    over each resample (requests of unequal length, a failed one unbounded)."""
    rng = np.random.default_rng(3)
    requests = [rng.exponential(1.0, int(n)) for n in rng.integers(1, 80, 25)]
    requests.append(np.array([np.inf]))
    at_once = percentiles.resampled_quantiles(requests, (50, 90, 99), seed=1, method=method)
    draws = np.random.default_rng(1)
    one_by_one = np.array([np.percentile(np.concatenate(
        [requests[i] for i in draws.integers(0, len(requests), len(requests))]),
        [50, 90, 99], method=method) for _ in range(percentiles.BOOTSTRAP_DRAWS)])
    np.testing.assert_allclose(at_once, one_by_one, rtol=1e-12)


def test_a_cell_whose_requests_file_is_gone_is_no_row_not_a_crash(tmp_path):
    from splitbench.summary import percentiles as p

    assert p.table([str(tmp_path / "cells/lab/a/m/ctxshort_c1.requests.parquet")]).empty
