"""cells.sweep_fit.fit: a sweep measured in rounds cancels what slows a whole round."""

from __future__ import annotations

import numpy as np
import pandas as pd

from splitbench.cells import sweep_fit

RR_MS = {0.0: 0.1, 1.0: 2.1, 2.0: 4.1}  # measured request-response latency per delay


def sweep(slowdown_ms: list[float], rounds: bool = True) -> pd.DataFrame:
    """Two round trips per token at a 2 ms base step, with noise, and in each round the
    machine `slowdown_ms[r]` slower for every point of that round."""
    rng = np.random.default_rng(0)
    rows = []
    for r, slow in enumerate(slowdown_ms):
        for delay, rr in RR_MS.items():
            step = 2.0 + 2 * (rr - 0.1) + slow + rng.normal(0, 0.02)
            rows.append({"delay_ms": delay, "rr_ms": rr, "error": None,
                         "step_ms_median": step, "round": r if rounds else None})
    return pd.DataFrame(rows)


def test_a_round_the_machine_slowed_down_does_not_blur_the_count():
    # One round of three ran 3 ms per step slower for every point (a busy neighbour).
    result = sweep_fit.fit(sweep([0.0, 3.0, 0.0]))
    assert abs(result["round_trips_per_token"] - 2) < 0.05, result
    assert result["round_trips_se"] < 0.05 and result["not_resolvable"] is None


def test_the_same_points_measured_one_after_another_carry_the_slowdown_as_spread():
    # Without rounds nothing pairs the points in time: the slowed requests are each
    # point's own spread, an uncertainty eight times the paired one.
    result = sweep_fit.fit(sweep([0.0, 3.0, 0.0], rounds=False))
    assert abs(result["round_trips_per_token"] - 2) < 0.05
    assert result["round_trips_se"] > 0.3, result


def test_a_round_with_a_failed_request_still_pairs_the_rest():
    frame = sweep([0.0, 0.0, 0.0, 0.0])
    frame.loc[(frame["round"] == 1) & (frame["delay_ms"] == 2.0), ["error", "step_ms_median"]] = \
        ["timeout", None]
    result = sweep_fit.fit(frame)
    assert abs(result["round_trips_per_token"] - 2) < 0.05 and result["points"] == 3


def test_a_sweep_is_flagged_by_what_else_used_the_machines_during_its_rounds():
    quiet = {"foreign_cpu_a_cores": 0.02, "foreign_cpu_b_cores": 0.02,
             "cpu_pressure_a_pct": 1.0, "cpu_pressure_b_pct": 1.0,
             "interference_a": "read over 30.0 s: PSI, /proc/stat",
             "interference_b": "read over 30.0 s: PSI, /proc/stat"}
    frame = sweep([0.0, 0.0]).assign(**quiet)
    assert sweep_fit.flags(frame, {}) is None
    busy = sweep_fit.flags(frame.assign(foreign_cpu_b_cores=1.41), {})
    assert busy == ("host B: other processes used 1.41 cores (limit 0.25 cores) during "
                    "the sweep's rounds"), busy
    # A sweep written before the meter: not checked, never clean.
    unmetered = sweep_fit.flags(sweep([0.0, 0.0]), {})
    assert unmetered is not None and unmetered.startswith("interference not measured on host A")


def sweep_with_waits(waits_per_ms: float, own_per_ms: float, rounds: int = 4) -> pd.DataFrame:
    """One turn per token whose wait grows `waits_per_ms` ms per ms of latency, and host
    A's own time per token `own_per_ms`; the machine slows whole rounds, as it does."""
    rng = np.random.default_rng(1)
    rows = []
    for r in range(rounds):
        slow = rng.normal(0, 0.05)
        for delay, rr in RR_MS.items():
            wait_ms = 0.05 + waits_per_ms * (rr - 0.1) + rng.normal(0, 0.005)
            own_ms = 0.6 + own_per_ms * (rr - 0.1) + slow + rng.normal(0, 0.005)
            rows.append({"delay_ms": delay, "rr_ms": rr, "error": None, "round": r,
                         "step_ms_median": wait_ms + own_ms, "turns_per_token": 1.0,
                         "turn_wait_us": wait_ms * 1000})
    return pd.DataFrame(rows)


def test_the_packets_split_the_slope_into_the_turns_waits_and_host_a_own_time():
    # The lab's sweeps read 1.03-1.06 round trips where the packets counted 1.00 turns:
    # the split says whether the extra is in the waits or on host A.
    on_a = sweep_fit.fit(sweep_with_waits(1.0, 0.04))
    assert abs(on_a["round_trips_per_token"] - 1.04) < 0.01, on_a
    assert abs(on_a["waits_per_latency"] - 1.0) < 0.01, on_a
    assert abs(on_a["a_time_per_latency"] - 0.04) < 0.01, on_a
    assert on_a["a_time_per_latency_se"] < 0.01
    in_waits = sweep_fit.fit(sweep_with_waits(1.04, 0.0))
    assert abs(in_waits["waits_per_latency"] - 1.04) < 0.01, in_waits
    assert abs(in_waits["a_time_per_latency"]) < 0.01, in_waits


def test_a_sweep_without_turn_waits_has_no_split():
    # No packet socket on A (or a sweep written before the waits were kept): no split.
    plain = sweep_fit.fit(sweep([0.0, 0.0, 0.0]))
    assert plain["waits_per_latency"] is None and plain["a_time_per_latency"] is None
    one_point_short = sweep_with_waits(1.0, 0.04)
    one_point_short.loc[one_point_short["delay_ms"] == 2.0, "turn_wait_us"] = None
    assert sweep_fit.fit(one_point_short)["waits_per_latency"] is None
