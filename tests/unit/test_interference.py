"""What counts as interference: other programs' CPU pressure, not the measurement's own
(its processes wait in a cgroup of their own, whose pressure is recorded apart)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from splitbench.health import anchor_check
from splitbench.infra import interference
from splitbench.summary import cell_summary

LIMITS = interference.settings({})  # the defaults: 50% pressure, 0.25 foreign cores


def telemetry(pressure: float, own: float | None, foreign: float = 0.03) -> dict:
    """One row's figures for both hosts of the embedded lab (one machine: the same)."""
    row = {}
    for side in interference.SIDES:
        row |= {f"cpu_pressure_{side}_pct": pressure, f"own_cpu_pressure_{side}_pct": own,
                f"foreign_cpu_{side}_cores": foreign, f"steal_{side}_pct": 0.0,
                f"own_cpu_{side}_cores": 1.5}
    return row


def test_the_measurement_s_own_pressure_is_not_interference():
    """vLLM's API server, engine and worker waiting for one core (the backends example:
    50-61% pressure, 0.03 foreign cores): the measurement's own, not flagged. The same
    pressure with the measurement's own at 8% is other programs': flagged."""
    rows = pd.DataFrame([telemetry(61.0, 59.0), telemetry(61.0, 8.0),
                         telemetry(61.0, None)], index=["own", "foreign", "unknown"])
    flags = interference.flag(rows, LIMITS)
    assert pd.isna(flags.loc["own", "interference"])
    assert flags.loc["foreign", "interference"] == (
        "hosts A and B: CPU pressure 53% from other programs (the measurement's own 8% "
        "aside) (limit 50%) during the cell")
    # Measured without a cgroup of its own: the machine's pressure, as before.
    assert flags.loc["unknown", "interference"] == (
        "hosts A and B: CPU pressure 61% (limit 50%) during the cell")
    assert flags["interference_checked"].all()
    # Other programs' CPU still counts whatever the pressure.
    busy = interference.flag(pd.DataFrame([telemetry(61.0, 59.0, foreign=0.8)]), LIMITS)
    assert "other processes used 0.80 cores" in busy.iloc[0]["interference"]


def test_own_pressure_comes_from_the_cgroup_s_counter():
    figures = interference.sum_figures({"seconds": 2.0, "hz": 100, "psi_some_us": 1.2e6,
                                        "own_psi_some_us": 1.1e6, "busy_ticks": 300,
                                        "own_ticks": 290, "steal_ticks": 0,
                                        "total_ticks": 400,
                                        "own_cgroup": "cgroup /sys/fs/cgroup/x (5 processes)"})
    assert figures["cpu_pressure_{side}_pct"] == 60.0
    assert figures["own_cpu_pressure_{side}_pct"] == 55.0
    assert "own PSI in cgroup /sys/fs/cgroup/x" in figures["interference_{side}"]
    alone = interference.sum_figures({"seconds": 2.0, "hz": 100, "psi_some_us": 1.2e6,
                                      "own_psi_some_us": None, "busy_ticks": 300,
                                      "own_ticks": 290, "own_cgroup": "no cgroup-v2 hierarchy"})
    assert alone["own_cpu_pressure_{side}_pct"] is None
    assert "own PSI unknown: no cgroup-v2 hierarchy" in alone["interference_{side}"]


def write_repeats(root: Path, figures: list[dict]) -> str:
    """A concurrency-2 cell whose repeats ran with these telemetry figures."""
    rows = []
    for repeat, extra in enumerate(figures):
        for request_id in range(2):
            rows.append({"request_id": request_id, "repeat": repeat, "status": "ok",
                         "cell_status": "ok", "generated_tokens": 8, "n_predict": 8,
                         "t_send_ns": 0, "t_last_ns": 10_000_000, "ttft_ms": 2.0,
                         "decode_ms_per_token": 1.0, "prefill_tps": 1000.0,
                         "cell_wall_ms": 10.0, "launch_id": "L", "link_fingerprint": "F",
                         "temp_before_c": None, "temp_after_c": None, **extra})
    path = root / "cells/lab/plain/tp/ctxshort_c2.requests.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def test_a_repeat_under_others_pressure_flags_its_cell(tmp_path):
    """Repeat 0: 60% pressure, 58% of it the measurement's own; repeat 1: 75%, 20% own.
    Taken column by column as the worst (60 and 58 at most) repeat 1's 55% of others
    would vanish; the summary keeps it (own pressure: the lowest repeat's)."""
    path = write_repeats(tmp_path, [telemetry(60.0, 58.0), telemetry(75.0, 20.0)])
    summary = cell_summary.summarize([path], {"short": 32}, {})
    row = summary.iloc[0]
    assert row["cpu_pressure_a_pct"] == 75.0 and row["own_cpu_pressure_a_pct"] == 20.0
    assert "CPU pressure 55% from other programs" in row["interference"]
    quiet = write_repeats(tmp_path / "q", [telemetry(60.0, 58.0), telemetry(57.0, 55.0)])
    assert pd.isna(cell_summary.summarize([quiet], {"short": 32}, {}).iloc[0]["flags"])
    # A drift anchor is judged the same way.
    requests = pd.read_parquet(path)
    assert "from other programs" in anchor_check.interference_verdict(requests, {})["interference"]


def test_a_figure_just_over_its_limit_never_reads_as_the_limit():
    # 0.254 cores over a limit of 0.25 read "0.25 cores (limit 0.25 cores)" on a real pair.
    assert interference.above(0.254, 0.25, 2) == "0.254"
    assert interference.above(0.31, 0.25, 2) == "0.31"
    assert interference.above(50.4, 50, 0) == "50.4"
    flags = interference.flag(pd.DataFrame([telemetry(5.0, 5.0, foreign=0.254)]), LIMITS)
    assert "other processes used 0.254 cores (limit 0.25 cores)" in flags["interference"][0]


def test_a_flag_names_the_other_processes_that_used_the_cpu():
    """Two stretches' readings of the other processes: their CPU in each stretch (a pid
    reused by another program is another process), the busiest three named with their
    cores, and the foreign-CPU flag naming them."""
    stretches = [({"7:100": ["stress-ng", 50], "9:300": ["sshd", 10]},
                  {"7:100": ["stress-ng", 150], "9:300": ["sshd", 11],
                   "12:900": ["make", 30]}),
                 ({"7:100": ["stress-ng", 150], "7:999": ["cron", 5]},
                  {"7:999": ["cron", 6], "13:950": ["cc1", 40], "14:960": ["sh", 2]})]
    sums: dict = {}
    for before, after in stretches:
        sums = interference._others_added(sums, before, after)
    assert sums == {"7:100": ["stress-ng", 100], "9:300": ["sshd", 1], "12:900": ["make", 30],
                    "7:999": ["cron", 1], "13:950": ["cc1", 40], "14:960": ["sh", 2]}
    # Over 2 s at 100 ticks a second: 0.50, 0.20, 0.15 cores; the rest are not named.
    top = interference.top_others(sums, 100, 2.0)
    assert top == "stress-ng (pid 7) 0.50 cores, cc1 (pid 13) 0.20 cores, make (pid 12) 0.15 cores"
    assert interference._others_added(sums, None, stretches[0][1]) is None  # not read
    assert interference.top_others({"1:1": ["idle", 0]}, 100, 2.0) is None
    row = telemetry(5.0, 5.0, foreign=0.85) | {"foreign_top_a": top, "foreign_top_b": top}
    reason = interference.flag(pd.DataFrame([row]), LIMITS)["interference"][0]
    assert reason == ("hosts A and B: other processes used 0.85 cores (limit 0.25 cores; the "
                      f"most: {top}) during the cell")
    # A cell's repeats: each distinct naming once.
    assert interference.named(pd.Series([top, None, top, "sh (pid 3) 0.30 cores"])) == \
        f"{top}; sh (pid 3) 0.30 cores"


def test_the_ssh_connection_a_remote_reading_came_through_is_the_measurements():
    """On B the reader's parents up to the listening sshd: the connection's monitor and
    session (sshd under sshd) carry the run's commands, sampler and readings, so their
    CPU over a stretch is the measurement's own; the listener, and another user's shell,
    are not."""
    from splitbench.remote import sensors

    def process(name: str, parent: int, ticks: int = 0) -> dict:
        return {"name": name, "start": 7, "ticks": ticks, "parent": parent}

    table = {1: process("sshd", 0), 40: process("sshd", 1), 41: process("sshd", 40),
             42: process("sh", 41), 43: process("python3", 42), 90: process("bash", 1)}
    assert sensors._connection(table, start=42) == [41, 40]
    assert sensors._connection(table, start=90) == []  # not over SSH
    meter = interference.Meter({"b": type("B", (), {"ssh": "b", "remote": False})()})
    before = {"t_mono": 0.0, "hz": 100, "busy_ticks": 100, "own_ticks": 10, "own_found": 1,
              "connection": {"41:7": 50, "40:7": 5}}
    after = {"t_mono": 1.0, "hz": 100, "busy_ticks": 160, "own_ticks": 30, "own_found": 1,
             "connection": {"41:7": 62, "40:7": 5, "44:9": 3}}
    sums = meter._added("b", {}, before, after)
    # own: 20 ticks of its processes, 12 of the connection's session (the new one, born
    # inside the stretch, counts from the next); foreign: the 28 left.
    assert sums["own_ticks"] == 32
    figures = interference.sum_figures(sums)
    assert figures["foreign_cpu_{side}_cores"] == 0.28
