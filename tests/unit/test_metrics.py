import pytest

from splitbench.backends import metrics
from splitbench.backends.client import Reply
from splitbench.backends.llamacpp import api as llamacpp_api


def reply_with_tokens(times_ms, prompt_n=100, status=200, n_predict=None):
    reply = Reply(request_id=0, t_send_ns=0, http_status=status)
    reply.tokens = [{"t_ns": int(t * 1e6)} for t in times_ms]
    reply.final = {"timings": {"prompt_n": prompt_n, "prompt_ms": 90.0,
                               "predicted_n": len(times_ms),
                               "predicted_ms": 10.0 * (len(times_ms) - 1), "cache_n": 0}}
    return reply


def test_request_figures_come_from_timestamps():
    row = llamacpp_api.request_row(reply_with_tokens([100, 110, 120, 130, 140]), 100, 5, True,
                                       1.0)
    assert row["status"] == "ok"
    assert row["ttft_ms"] == pytest.approx(100)
    assert row["prefill_tps"] == pytest.approx(1000)
    assert row["decode_ms_per_token"] == pytest.approx(10)
    assert row["decode_tps"] == pytest.approx(100)
    assert row["server_decode_ms_per_token"] == pytest.approx(10)


def test_statuses():
    wall = Reply(request_id=0, http_status=400, error_type="exceed_context_size_error")
    assert llamacpp_api.request_row(wall, 10, 5, True, 1.0)["status"] == "ctx_wall"
    full = Reply(request_id=0, http_status=500, error_type="server_error")
    assert llamacpp_api.request_row(full, 10, 5, True, 1.0)["status"] == "overflow"
    short = reply_with_tokens([1, 2, 3])
    assert llamacpp_api.request_row(short, 100, 5, True, 1.0)["status"] == "overflow"
    slow = reply_with_tokens([0, 2000, 4000, 6000, 8000])
    assert llamacpp_api.request_row(slow, 100, 5, True, 1.0)["status"] == "crash"
    gone = Reply(request_id=0, http_status=200, error_type="RemoteProtocolError")
    assert llamacpp_api.request_row(gone, 100, 5, False, 1.0)["status"] == "crash"
    late = Reply(request_id=0, error_type="timeout")
    assert llamacpp_api.request_row(late, 100, 5, True, 1.0)["status"] == "timeout"


def test_cell_status_is_the_worst():
    assert metrics.cell_status(["ok", "ok"]) == "ok"
    assert metrics.cell_status(["ok", "ctx_wall", "crash"]) == "crash"
    assert metrics.cell_status(["ok", "overflow"]) == "overflow"


@pytest.mark.parametrize(
    ("n", "single", "wall", "expected"),
    [
        (4, 100.0, 100.0, 1.0),   # all four took as long as one: fully concurrent
        (4, 100.0, 400.0, 0.0),   # as long as four in a row: serial
        (2, 100.0, 150.0, 0.5),   # half way
        (4, 100.0, 460.0, -0.2),  # worse than serial (the seed's 100K x 4)
    ],
)
def test_overlap(n, single, wall, expected):
    assert metrics.overlap(n, single, wall) == pytest.approx(expected)


def test_overlap_undefined_without_reference_or_for_one_stream():
    assert metrics.overlap(1, 100.0, 100.0) is None
    assert metrics.overlap(4, None, 100.0) is None


def test_decode_standard_error_is_the_gaps_spread_over_root_n():
    # Gaps 10, 20, 30, 40 ms: mean 25, sample std 12.91; 4 gaps -> 12.91 / 2 = 6.455 ms.
    row = llamacpp_api.request_row(reply_with_tokens([100, 110, 130, 160, 200]), 100, 5, True,
                                       1.0)
    assert row["decode_ms_per_token"] == pytest.approx(25.0)
    assert row["decode_ms_se"] == pytest.approx(12.909944 / 2, rel=1e-6)
    # Fewer than three tokens leave one gap at most: no spread to estimate.
    assert llamacpp_api.request_row(reply_with_tokens([100, 110]), 100, 2, True, 1.0)[
        "decode_ms_se"] is None


def test_the_arrival_clock_a_reply_used_is_recorded():
    reply = reply_with_tokens([100, 110, 120])
    reply.arrival_clock = "read"  # no packet clock, no kernel stamp: the read's own time
    assert llamacpp_api.request_row(reply, 100, 3, True, 1.0)["arrival_clock"] == "read"


def stamped_reply(arrival_ms, server_ms):
    """A reply whose tokens carry the server's cumulative stamps (llama.cpp's
    timings_per_token), arriving at `arrival_ms`."""
    reply = reply_with_tokens(arrival_ms)
    for token, stamp in zip(reply.tokens, server_ms, strict=True):
        token["server_cum_predicted_ms"] = stamp
    reply.final["timings"]["predicted_ms"] = server_ms[-1] - server_ms[0]
    return reply


def test_client_and_server_agree_when_every_token_crosses_alike():
    server = [0.0, 10.0, 20.0, 30.0, 40.0]
    row = llamacpp_api.request_row(stamped_reply([100.2 + s for s in server], server),
                                   100, 5, True, 1.0)
    assert row["decode_vs_server"] == pytest.approx(0, abs=1e-9)
    assert row["first_token_late_ms"] == pytest.approx(0, abs=1e-6)
    assert row["last_token_late_ms"] == pytest.approx(0, abs=1e-6)


def test_a_first_token_that_reached_the_client_late_is_named_and_shortens_decode():
    server = [0.0, 10.0, 20.0, 30.0, 40.0]
    arrival = [100 + s for s in server]
    arrival[0] += 2.5  # sent 2.5 ms after the server stamped it; the rest on time
    row = llamacpp_api.request_row(stamped_reply(arrival, server), 100, 5, True, 1.0)
    assert row["decode_vs_server"] == pytest.approx(37.5 / 40 - 1)
    assert row["first_token_late_ms"] == pytest.approx(2.5)
    assert row["last_token_late_ms"] == pytest.approx(0)


def test_a_late_last_token_stretches_decode_and_is_named():
    server = [0.0, 10.0, 20.0, 30.0, 40.0]
    arrival = [100 + s for s in server]
    arrival[-1] += 4.0
    row = llamacpp_api.request_row(stamped_reply(arrival, server), 100, 5, True, 1.0)
    assert row["decode_vs_server"] == pytest.approx(44 / 40 - 1)
    assert row["last_token_late_ms"] == pytest.approx(4.0)
    assert row["first_token_late_ms"] == pytest.approx(0)


def test_without_the_servers_token_stamps_only_the_decode_gap_is_known():
    row = llamacpp_api.request_row(reply_with_tokens([100, 110, 120, 130, 140]), 100, 5, True,
                                   1.0)
    assert row["decode_vs_server"] == pytest.approx(0)
    assert row["first_token_late_ms"] is None and row["last_token_late_ms"] is None
