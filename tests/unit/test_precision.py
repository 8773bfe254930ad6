"""Cells that stop when their figures are known (`cell.precision`, infra/precision.py):
the ± the rule reads is the one the report prints, it looks only at fixed
checkpoints, each kind of cell reads only its own targets, and a cell records why it
stopped; the link check's iperf3 runs stop by the same rule."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from splitbench.backends import metrics
from splitbench.backends.client import Reply
from splitbench.cells import measure
from splitbench.configuration import parsed
from splitbench.infra import intervals, precision
from splitbench.links import verify
from splitbench.matrix import estimate, plan
from splitbench.summary import cell_summary
from tests.support import write_cell

CONFIG = Path(__file__).resolve().parents[2] / "config/config.yaml"


def test_the_rule_looks_only_at_its_checkpoints():
    looks = [n for n in range(1, 100) if precision.is_checkpoint(n, 5)]
    assert looks == [5, 10, 20, 40, 80]
    assert [n for n in range(1, 30) if precision.is_checkpoint(n, 3)] == [3, 6, 12, 24]
    assert precision.checkpoint_at_least(11, 5) == 20
    assert precision.checkpoint_at_least(2, 5) == 5


def test_the_relative_uncertainty_is_the_one_the_summary_prints():
    rng = np.random.default_rng(3)
    decode = list(1.0 + 0.05 * rng.standard_normal(12))
    token_se = list(0.004 + 0.001 * rng.random(12))
    prefill = list(30000 + 2000 * rng.standard_normal(12))
    ok = pd.DataFrame({"pair": "lab", "link": "x", "model": "m", "ctx": "short", "conc": 1,
                       "repeat": 0, "shot": range(12),
                       "decode_ms_per_token": decode, "decode_ms_se": token_se,
                       "prefill_tps": prefill, "ttft_ms": 10.0})
    printed = cell_summary._uncertainty(ok).iloc[0]
    assert precision.relative_unc(decode, token_se) == pytest.approx(
        printed["decode_ms_unc"] / np.median(decode))
    assert precision.relative_unc(prefill) == pytest.approx(
        printed["prefill_tps_unc"] / np.median(prefill))
    # Student's t at the 12 requests' 11 degrees of freedom, not a fixed 2.
    assert printed["prefill_tps_unc"] == pytest.approx(
        intervals.t_factor(11) * printed["prefill_tps_se"])
    # Where the requests agree better than their tokens allow, the tokens' floor holds.
    steady = [1.0] * 12
    assert precision.relative_unc(steady, token_se) == pytest.approx(
        intervals.t_factor(11) * np.median(token_se) / np.sqrt(12))
    assert precision.relative_unc([1.0]) is None


def test_the_rule_stops_on_the_spreads_upper_bound_not_on_the_spread():
    """Ten requests that happen to agree: the printed ± is within the target, but the
    spread they may really have (its 95% upper bound, 1.65 x at 10 samples) is not."""
    values = list(1.0 + 0.045 * np.array([-1.5, -1, -0.6, -0.3, 0, 0, 0.3, 0.6, 1, 1.5]))
    printed = precision.relative_unc(values)
    stopping = precision.relative_unc(values, spread="stopping")
    assert printed < 0.05 < stopping
    assert stopping / printed == pytest.approx(intervals.sd_upper(1.0, 10), rel=1e-6)
    assert precision.reached({"decode_rel": printed}, {"decode_rel": 0.05})
    assert not precision.reached({"decode_rel": stopping}, {"decode_rel": 0.05})


def test_a_figure_without_a_uncertainty_is_not_known_and_no_target_never_stops():
    assert precision.reached({"decode_rel": 0.01}, {"decode_rel": 0.02})
    assert not precision.reached({"decode_rel": 0.03}, {"decode_rel": 0.02})
    assert not precision.reached({"decode_rel": None}, {"decode_rel": 0.02})
    assert not precision.reached({"decode_rel": 0.01}, {})
    # A target set to null asks nothing.
    assert precision.reached({"decode_rel": 0.01}, {"decode_rel": 0.02, "prefill_rel": None})


class TimedBackend:
    """Streams each release on a fake clock (`release_s` each); each request's decode
    step is `step_ms` times a draw around 1 (spread `spread`), its TTFT 10 ms."""

    def __init__(self, clock: list[float], release_s: float, spread: float,
                 fail_at: int | None = None):
        self.clock, self.release_s, self.spread, self.fail_at = clock, release_s, spread, fail_at
        self.releases = 0
        self.rng = np.random.default_rng(7)

    def prompt_pool(self, url):
        return None

    def prompt(self, pool, tokens, seed):
        return [1] * tokens

    def traffic(self, link, server):
        return SimpleNamespace(at_first_token=lambda *_: None, finish=lambda: None)

    def stream(self, url, batch, n_predict, timeout_s, at_first_token):
        self.releases += 1
        self.clock[0] += self.release_s
        send = int(self.clock[0] * 1e9)
        replies = []
        for i in range(len(batch)):
            step = int(1e6 * (1 + self.spread * self.rng.standard_normal()))
            first = send + 10_000_000
            replies.append(Reply(request_id=i, http_status=200, t_send_ns=send,
                                 tokens=[{"t_ns": first + k * step, "t_mono_ns": k}
                                         for k in range(n_predict)]))
        if self.releases == self.fail_at:
            replies[0].http_status, replies[0].error_type = 500, "server_error"
        return replies

    def request_row(self, reply, prompt_tokens, n_predict, alive, crash_below_tps):
        return metrics.request_row(reply, prompt_tokens, n_predict, alive, crash_below_tps,
                                   {})


class BusyMeter:
    """A meter whose first `busy_for` readings find another program at work."""

    def __init__(self, busy_for: int = 10**6):
        self.readings, self.busy_for = 0, busy_for

    def others_at_work(self, limits):
        self.readings += 1
        return "host A: other processes used 1.00 cores" \
            if self.readings <= self.busy_for else None


def drive(monkeypatch, cell: dict, release_s: float, spread: float,
          fail_at: int | None = None, meter: BusyMeter | None = None):
    clock = [0.0]
    backend = TimedBackend(clock, release_s, spread, fail_at)
    monkeypatch.setattr(measure, "backend_of", lambda c: backend)
    monkeypatch.setattr(measure.time, "monotonic", lambda: clock[0])
    link = SimpleNamespace(host_a=SimpleNamespace(entered=contextlib.nullcontext),
                           pair="lab", name="x")
    cell = {"prompt_tokens": 128, "n_predict": 16, "request_timeout_s": 5.0,
            "crash_below_tps": 0.0} | cell
    return measure._drive(cell, link, SimpleNamespace(url="http://a"), meter=meter)


SINGLE = {"concurrency": 1, "single_stream_requests": 3, "single_stream_seconds": 10.0}
CONCURRENT = {"concurrency": 4, "concurrent_releases": 3, "concurrent_seconds": 10.0}


def test_a_steady_single_stream_stops_at_its_first_checkpoint_not_before(monkeypatch):
    cell = SINGLE | {"precision": {"decode_rel": 0.05, "prefill_rel": 0.15}}
    shots, stopped = drive(monkeypatch, cell, 0.1, spread=0.001)
    # Known after 3 already, but the rule first looks at 10.
    assert (len(shots), stopped) == (10, precision.TARGET)


def test_a_cell_beside_another_programs_work_does_not_stop_early(monkeypatch):
    """Its figures are known at 10 requests, but the meter reads other work: a few
    requests that missed its bursts understate the spread, so it runs to its ceiling."""
    cell = SINGLE | {"precision": {"decode_rel": 0.05, "prefill_rel": 0.15}}
    busy = BusyMeter()
    shots, stopped = drive(monkeypatch, cell, 0.125, spread=0.001, meter=busy)
    assert (len(shots), stopped) == (80, precision.CEILING)
    assert busy.readings == 3  # asked at the checkpoints only: 10, 20, 40
    # The other program ends after the first look: the cell stops at the next.
    shots, stopped = drive(monkeypatch, cell, 0.125, spread=0.001, meter=BusyMeter(1))
    assert (len(shots), stopped) == (20, precision.TARGET)


def test_a_noisy_cell_runs_to_its_ceiling_and_says_so(monkeypatch):
    cell = SINGLE | {"precision": {"decode_rel": 0.001}}
    shots, stopped = drive(monkeypatch, cell, 0.125, spread=0.2)
    assert (len(shots), stopped) == (80, precision.CEILING)  # 10 s at 0.125 s each
    # Without targets the seconds alone decide, as before the rule.
    shots, stopped = drive(monkeypatch, SINGLE, 0.125, spread=0.001)
    assert (len(shots), stopped) == (80, precision.CEILING)


def test_a_concurrent_cell_reads_its_releases_and_stops_on_a_failure(monkeypatch):
    cell = CONCURRENT | {"precision": {"decode_rel": 0.05, "throughput_rel": 0.1,
                                       "prefill_rel": 0.000001}}  # not a concurrent target
    shots, stopped = drive(monkeypatch, cell, 0.5, spread=0.001)
    # The first look at 6 releases (the concurrent cell's sample unit).
    assert (len(shots), stopped) == (6, precision.TARGET)
    shots, stopped = drive(monkeypatch, cell | {"concurrent_releases": 5}, 0.5, spread=0.001,
                           fail_at=4)
    assert (len(shots), stopped) == (4, precision.FAILURE)


def run_of(round_: int, reference: bool, step_ms: float) -> measure.Run:
    tokens = [{"t_ns": 10_000_000 + int(k * step_ms * 1e6), "t_mono_ns": k} for k in range(16)]
    run = measure.Run(reference, round_)
    run.shots = [([Reply(request_id=0, http_status=200, t_send_ns=0, tokens=tokens)], None)]
    return run


def test_a_paired_cell_stops_where_its_difference_is_known(monkeypatch):
    monkeypatch.setattr(measure, "backend_of", lambda c: TimedBackend([0.0], 0, 0))
    cell = {"concurrency": 1, "prompt_tokens": 128, "n_predict": 16, "crash_below_tps": 0.0,
            "precision": {"paired_decode_ms": 0.05}}
    rng = np.random.default_rng(1)

    def rounds(n: int, spread: float) -> list[measure.Run]:
        return [run for r in range(n) for run in (
            run_of(r, True, 1.0 + spread * rng.standard_normal()),
            run_of(r, False, 1.5 + spread * rng.standard_normal()))]

    assert measure.paired_known(cell, rounds(10, 0.01))
    assert not measure.paired_known(cell, rounds(9, 0.01))  # no checkpoint
    assert not measure.paired_known(cell, rounds(10, 0.3))  # its ± is wider than 0.05
    assert not measure.paired_known(cell | {"precision": {}}, rounds(10, 0.01))
    # Five rounds are a single stream's first look, not a paired cell's: neighbouring
    # rounds agree more than distant ones, so their spread is not yet one to stop on.
    assert not measure.paired_known(cell, rounds(5, 0.01))
    assert measure.paired_known(cell, rounds(20, 0.01))


def test_each_kind_of_cell_carries_only_its_own_targets_and_the_anchor_none():
    config = parsed(plan.read_yaml(CONFIG))
    single = plan.cell_slice(config, plan.Cell("lab", "baseline", "synth", "short", 1))
    paired = plan.cell_slice(config, plan.Cell("lab", "5gbe", "synth", "short", 1))
    many = plan.cell_slice(config, plan.Cell("lab", "5gbe", "synth", "short", 4))
    assert set(single["precision"]) == {"decode_rel", "prefill_rel"}
    # The default sets no paired target (its cells run their rounds): none in the slice.
    assert "precision" not in paired
    targeted = plan.read_yaml(CONFIG)
    targeted["cell"]["precision"]["paired_decode_ms"] = 0.03
    paired = plan.cell_slice(parsed(targeted), plan.Cell("lab", "5gbe", "synth", "short", 1))
    assert set(paired["precision"]) == {"paired_decode_ms"}
    assert set(many["precision"]) == {"decode_rel", "throughput_rel"}
    assert "precision" not in plan.anchor_slice(config, "lab", "synth")
    # A config without targets: slices as before the key existed (nothing re-measured).
    raw = plan.read_yaml(CONFIG)
    del raw["cell"]["precision"]
    assert "precision" not in plan.cell_slice(parsed(raw), plan.Cell(
        "lab", "5gbe", "synth", "short", 1))


def test_the_interference_limits_the_early_stop_reads_travel_only_where_set():
    """The default config's cells read the limits' defaults (their slices unchanged);
    limits the config sets are in each slice with targets, so changing them re-measures
    those cells, and never in the anchor's, which stops at no target."""
    raw = plan.read_yaml(CONFIG)
    cell = plan.Cell("lab", "5gbe", "synth", "short", 4)
    assert "interference" not in plan.cell_slice(parsed(raw), cell)
    raw["interference"] = {"max_foreign_cpu_cores": 0.5}
    assert plan.cell_slice(parsed(raw), cell)["interference"] == {"max_foreign_cpu_cores": 0.5}
    assert "interference" not in plan.anchor_slice(parsed(raw), "lab", "synth")
    del raw["cell"]["precision"]
    assert "interference" not in plan.cell_slice(parsed(raw), cell)


def test_the_link_check_stops_its_iperf_runs_where_every_direction_agrees():
    def runs(*gbps: float) -> dict:
        one = [{"a_to_b": g, "b_to_a": g} for g in gbps]
        return {"fwd": one, "rev": one, "bidir": one}

    assert verify.throughput_known(runs(1.00, 1.04), 0.05)
    assert not verify.throughput_known(runs(1.00, 1.20), 0.05)
    assert not verify.throughput_known(runs(1.00), 0.05)  # no spread yet
    assert not verify.throughput_known(runs(1.00, 1.01, 1.00), 0.05)  # no checkpoint
    assert not verify.throughput_known(runs(1.00, 1.00), None)


def test_the_estimate_stops_a_cell_where_its_targets_would():
    # One sample's decode ± 20%: 16 samples for 5%, so the checkpoint at 20.
    assert estimate.samples_to_target({"decode_rel": 0.05}, {"decode_rel": 0.2}, 5) == 20
    assert estimate.samples_to_target({"decode_rel": 0.05}, {}, 5) is None  # unknown
    assert estimate.releases(3, 10.0, 0.1, stop_at=20) == 20  # 100 by its seconds
    assert estimate.releases(3, 10.0, 1.0, stop_at=20) == 10  # its seconds first
    assert estimate.releases(3, 0.0, 1.0, stop_at=5) == 3  # the floor, however known
    summary = pd.DataFrame({
        "model": "m", "ctx": "short", "conc": [1, 1, 4], "link": ["a", "b", "a"],
        "status": "ok", "prefill_tps": 1000.0, "decode_tps": 500.0,
        "decode_ms_per_token": 2.0, "decode_ms_se": [0.01, 0.03, 0.05], "samples": 25,
        "prefill_tps_se": 10.0, "throughput_tps": 800.0, "throughput_tps_se": 20.0,
        "releases": [None, None, 9]})
    speed = estimate.speeds_from_summary(summary)[("m", "short")]
    # decode: 1.96 x 0.02 (the median se) / 2.0 x sqrt(25) = 0.098 for one sample.
    z = intervals.t_factor(np.inf)
    assert speed.unit_unc[1]["decode_rel"] == pytest.approx(z * 0.02 / 2.0 * 5)
    assert speed.unit_unc[4]["throughput_rel"] == pytest.approx(z * 20 / 800 * 3)
    assert "throughput_rel" not in speed.unit_unc[1]


def test_the_summary_says_why_each_cell_stopped(tmp_path):
    from tests.support.matrices import release_request

    def cell(link: str, stopped: str | None, repeats: int = 1) -> str:
        rows = [release_request(i, shot=i, send_ms=100.0 * i, wall_ms=50.0, stopped=stopped,
                        repeat=i % repeats, conc=1, link=link)
                for i in range(6)]
        if stopped is None:
            rows = [{k: v for k, v in r.items() if k != "stopped"} for r in rows]
        return write_cell(tmp_path, link, "short", 1, rows)

    files = [cell("a", precision.TARGET), cell("b", precision.CEILING), cell("c", None)]
    summary = cell_summary.summarize(files, {"short": 128}).set_index("link")
    assert summary.loc["a", "stopped"] == "target"
    assert summary.loc["b", "stopped"] == "ceiling"
    assert pd.isna(summary.loc["c", "stopped"])  # measured before the column


def test_the_estimate_looks_where_the_cell_would_past_its_floor_and_never_at_anchors():
    # A floor of 8 with first looks at 5, 10: the cell's first look past its floor is 10.
    assert estimate.samples_to_target({"decode_rel": 0.05}, {"decode_rel": 0.05}, 5,
                                      least=8) == 10
    config = parsed(plan.read_yaml(CONFIG))
    fast = estimate.Speed(30000.0, 1000.0, {1: {"decode_rel": 0.01, "prefill_rel": 0.01}})
    anchor = plan.anchor_cell(config, "lab", "synth")
    # Known at the first look as a cell; an anchor sends its full seconds.
    assert estimate.cell_seconds(config, anchor, fast) < estimate.cell_seconds(
        config, anchor, fast, anchor=True)
    # A paired cell known from its first round: it still runs to its first look, 10
    # rounds of a request on each launch.
    paired = plan.Cell("lab", "usb4", "synth", "short", 1)
    assert plan.paired_for(config, paired)
    sure = estimate.Speed(30000.0, 1000.0, {1: {"paired_decode_ms": 0.001}})
    one = config.contexts["short"] / 30000.0 + config.cell.n_predict / 1000.0
    # The default sets no paired target: all its 20 rounds.
    assert estimate.cell_seconds(config, paired, sure, launch_s=0) == pytest.approx(
        estimate.JOB_OVERHEAD_S + 20 * 2 * one)
    targeted = plan.read_yaml(CONFIG)
    targeted["cell"]["precision"]["paired_decode_ms"] = 0.03
    assert estimate.cell_seconds(parsed(targeted), paired, sure, launch_s=0) == \
        pytest.approx(estimate.JOB_OVERHEAD_S + precision.FIRST_LOOK_PAIRED * 2 * one)


def test_why_a_cell_stopped_is_a_failure_wherever_one_cut_it_short():
    ok = run_of(0, False, 1.0)
    ok.stopped = precision.TARGET
    assert measure.stopped_because([ok]) == precision.TARGET
    launch_failed = measure.Run(False, 0)
    launch_failed.shots = [([Reply(request_id=0, error_type="launch_failed")], None)]
    assert measure.stopped_because([launch_failed]) == precision.FAILURE
    reference = run_of(0, True, 1.0)
    reference.harness_error = "Traceback ..."
    assert measure.stopped_because([reference, ok]) == precision.FAILURE


def test_a_null_iperf_target_plans_as_no_key():
    raw = plan.read_yaml(CONFIG)
    without = dict(raw, link_check={k: v for k, v in raw["link_check"].items()
                                    if k != "iperf_spread_rel"})
    null = dict(raw, link_check={**raw["link_check"], "iperf_spread_rel": None})
    assert plan.link_check_settings(parsed(null)) == plan.link_check_settings(
        parsed(without))
