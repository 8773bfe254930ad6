"""A matrix's expected duration (splitbench/matrix/estimate.py): request counts as a cell sends
them, prompts and tokens at the given rates, and the jobs around the cells."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from splitbench.cells import stopping
from splitbench.configuration import parsed
from splitbench.matrix import estimate, plan
from tests.conftest import ROOT, tiny_config

FAST = estimate.Speed(prefill_tps=1000.0, decode_tps=50.0)


@pytest.fixture
def config():
    """tiny.yaml: 2 links x 2 models x 2 contexts x concurrency 1 and 2, the slow link's
    short single-stream cells paired with the plain link."""
    return tiny_config()


def every(config, speed=FAST):
    return {(c.model, c.ctx): speed for c in plan.cells(parsed(config))}


@pytest.mark.parametrize("release_s", [0.7, 2.5, 4.0, 30.0])
@pytest.mark.parametrize(("least", "seconds"), [(3, 10.0), (5, 3.0), (1, 0.0)])
def test_releases_are_what_a_cell_sends(release_s, least, seconds):
    cell = {"concurrency": 1, "single_stream_requests": least,
            "single_stream_seconds": seconds}
    sent = 0
    while stopping.more_shots(cell, sent, sent * release_s):
        sent += 1
    assert estimate.releases(least, seconds, release_s) == sent


def test_a_release_prefills_its_prompts_one_after_another():
    # 4 prompts of 5,000 tokens at 1,000 tok/s, then 100 tokens at 50 tok/s.
    assert estimate.release_seconds(5000, 4, 100, FAST) == pytest.approx(4 * 5 + 2)
    assert estimate.release_seconds(100000, 4, 100, None) == 0  # the context wall


def test_a_release_is_as_long_as_a_summary_measured_one_at_its_concurrency():
    """On the shaped links a 4-way 5k release took 1.2-2.2 s where the single-stream
    rates make it 1.5: a measured release stands in for the model; a concurrency the
    summary did not measure keeps the model."""
    measured = estimate.Speed(1000.0, 50.0, release_s={2: 3.5})
    assert estimate.release_seconds(5000, 2, 100, measured) == pytest.approx(3.5)
    assert estimate.release_seconds(5000, 4, 100, measured) == pytest.approx(4 * 5 + 2)


def test_cells_single_stream_concurrent_paired_and_refused(config):
    settings = plan.cell_settings(parsed(config))
    n_predict, prompt = settings["n_predict"], config["contexts"]["mid"]
    one = prompt / FAST.prefill_tps + n_predict / FAST.decode_tps
    single = plan.Cell("t", "plain", "tiny", "mid", 1)
    expected = one * estimate.releases(settings["single_stream_requests"],
                                       settings["single_stream_seconds"], one)
    assert estimate.cell_seconds(parsed(config), single, FAST) == pytest.approx(
        estimate.JOB_OVERHEAD_S + expected)
    two = plan.Cell("t", "plain", "tiny", "mid", 2)
    release = 2 * prompt / FAST.prefill_tps + n_predict / FAST.decode_tps
    least = settings.get("concurrent_releases", 1)
    assert estimate.cell_seconds(parsed(config), two, FAST) == pytest.approx(
        estimate.JOB_OVERHEAD_S + release * estimate.releases(
            least, settings.get("concurrent_seconds", 0.0), release))
    paired = plan.Cell("t", "slow", "tiny", "short", 1)
    rounds = config["cell"]["paired"]["rounds"] * config["cell"]["paired"]["requests"]
    short = (config["contexts"]["short"] / FAST.prefill_tps
             + n_predict / FAST.decode_tps)
    assert estimate.cell_seconds(parsed(config), paired, FAST, launch_s=60) == pytest.approx(
        estimate.JOB_OVERHEAD_S + 60 + rounds * 2 * short)
    # A context the model cannot hold: one refused release, whatever the counts.
    assert estimate.cell_seconds(parsed(config), two, None) == estimate.JOB_OVERHEAD_S
    config["repeats"] = 3
    assert estimate.cell_seconds(parsed(config), single, FAST) == pytest.approx(
        estimate.JOB_OVERHEAD_S + 3 * expected)


def test_the_matrix_adds_up_every_job(config):
    parts = estimate.expected_seconds(parsed(config), every(config), launch_s=60)
    assert parts["total"] == pytest.approx(sum(v for k, v in parts.items() if k != "total"))
    assert parts["launches"] == (estimate.JOB_OVERHEAD_S + 60) * 2 * 2  # links x models
    assert parts["links"] == 2 * estimate.link_seconds(parsed(config))
    assert parts["cells"] == pytest.approx(sum(
        estimate.cell_seconds(parsed(config), c, FAST, 60) for c in plan.cells(parsed(config))))
    typed = parsed(config)
    anchor = estimate.cell_seconds(typed, plan.anchor_cell(typed, "t", "tiny"), FAST, 60)
    assert parts["anchors"] == pytest.approx(2 * 2 * anchor)  # models x start and end
    # Slower decode, longer run; a missing rate is named, not guessed.
    slow = estimate.expected_seconds(parsed(config), every(config, estimate.Speed(1000, 5)))
    assert slow["cells"] > parts["cells"]
    with pytest.raises(ValueError, match="no speed"):
        estimate.expected_seconds(parsed(config), {("tiny", "short"): FAST})


def test_link_checks_count_every_iperf3_run(config):
    config["link_check"] = {"iperf_seconds": 10, "iperf_omit": 2, "iperf_repeats": 3}
    # A->B, B->A and both at once, three times, each 10 s after 2 s left out.
    assert estimate.link_seconds(parsed(config)) == pytest.approx(
        estimate.JOB_OVERHEAD_S + estimate.LINK_CHECK_S + 9 * 13)


def test_speeds_from_a_summary():
    summary = pd.DataFrame([
        # model, link, ctx, conc, status, prefill, decode
        ("m", "a", "5k", 1, "ok", 1000.0, 50.0),
        ("m", "b", "5k", 1, "ok", 1200.0, 40.0),
        ("m", "c", "5k", 1, "ok", 1100.0, 45.0),
        ("m", "a", "5k", 2, "ok", None, None),
        ("m", "a", "100k", 1, "ctx_wall", None, None),
        ("m", "b", "100k", 1, "ctx_wall", None, None),
    ], columns=["model", "link", "ctx", "conc", "status", "prefill_tps", "decode_tps"])
    assert estimate.speeds_from_summary(summary) == {
        ("m", "5k"): estimate.Speed(1100.0, 45.0), ("m", "100k"): None}


def test_a_summarys_concurrent_releases_give_each_concurrencys_release_time():
    """A concurrent cell's wall_ms is its median release's: the median over the links
    that ran it ok, by concurrency; a failed cell's is not a release's."""
    summary = pd.DataFrame([
        # model, link, ctx, conc, status, prefill, decode, wall_ms
        ("m", "a", "5k", 1, "ok", 1000.0, 50.0, 3000.0),
        ("m", "a", "5k", 2, "ok", None, None, 1000.0),
        ("m", "b", "5k", 2, "ok", None, None, 1400.0),
        ("m", "c", "5k", 2, "ok", None, None, 1100.0),
        ("m", "d", "5k", 2, "crash", None, None, 90.0),
        ("m", "a", "5k", 4, "ok", None, None, 2000.0),
    ], columns=["model", "link", "ctx", "conc", "status", "prefill_tps", "decode_tps",
                "wall_ms"])
    (speed,) = estimate.speeds_from_summary(summary).values()
    assert speed.release_s == {2: pytest.approx(1.1), 4: pytest.approx(2.0)}


def test_the_round_trip_sweeps_count_a_launch_per_delay():
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    parts = estimate.expected_seconds(parsed(config), every(config), launch_s=60)
    sweep = plan.roundtrip_settings(parsed(config))
    points = len(sweep["delays_ms"])
    request = sweep["prompt_tokens"] / FAST.prefill_tps + sweep["n_predict"] / FAST.decode_tps
    one = estimate.JOB_OVERHEAD_S + points * (60 + sweep["requests"] * request)
    assert parts["roundtrips"] == pytest.approx(len(sweep["workers"]) * one)


def test_a_runs_measured_loads_replace_the_assumed_launch_time(tmp_path):
    """The longest load a run's launch records measured, and the launch's setup beside
    it; a failed launch (no load_s) and a run with none leave the estimate's own."""
    import json

    from splitbench.contracts import results

    assert estimate.launch_seconds_from(tmp_path) is None
    for link, record in (("usb4", {"load_s": 41.5}), ("5gbe", {"load_s": 12.0}),
                         ("tb5", {"status": "failed"})):
        path = tmp_path / results.LAUNCH.format(pair="lab", link=link, model="m").split("/", 1)[1]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
    assert estimate.launch_seconds_from(tmp_path) == 41.5 + estimate.LAUNCH_SETUP_S


def _job_log(root, name: str, start_s: float, end_s: float, base_ns: int) -> None:
    """A measuring job's log under root/logs, stamped as cli.stamped stamps it."""
    path = root / "logs" / f"{name}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"splitbench: x started at {base_ns + int(start_s * 1e9)} ns on vm\n"
                    "what the job printed\n"
                    f"splitbench: x ended at {base_ns + int(end_s * 1e9)} ns on vm\n")


def test_a_runs_job_logs_give_what_its_jobs_cost_besides_their_requests(tmp_path, config):
    """A job's own time: the median gap between jobs plus the median time a cell took
    beyond its requests; a link check's and a launch's, their jobs'; the report's, from
    the last job's end to checks.txt. The estimate uses them in place of its defaults."""
    import os

    base = 1_800_000_000 * 10**9
    _job_log(tmp_path, "links/t/plain", 0.0, 20.0, base)
    _job_log(tmp_path, "servers/t/plain/tiny", 20.5, 21.0, base)
    _job_log(tmp_path, "cells/t/plain/tiny/ctxshort_c1", 21.6, 24.6, base)
    _job_log(tmp_path, "cells/t/plain/tiny/ctxshort_c2", 25.2, 27.2, base)
    (tmp_path / "logs/models").mkdir()
    (tmp_path / "logs/models/tiny.log").write_text("a job that drives no pair\n")
    (tmp_path / "logs/models/odd.log").mkdir()  # not a file: passed over
    checks = tmp_path / "checks.txt"
    checks.write_text("splitbench check ok\n")
    os.utime(checks, (base / 1e9 + 37.2, base / 1e9 + 37.2))
    summary = pd.DataFrame({"pair": ["t", "t"], "link": ["plain"] * 2, "model": ["tiny"] * 2,
                            "ctx": ["short"] * 2, "conc": [1, 2], "wall_ms": [2500.0, 500.0]})

    got = estimate.overheads_from(tmp_path, summary)
    # gaps 0.5, 0.6, 0.6 s; the single-stream cell 0.5 s beyond its requests (a concurrent
    # cell's wall_ms is one release's: not read)
    assert got.job_s == pytest.approx(0.6 + 0.5)
    assert got.link_check_s == pytest.approx(20.0)
    assert got.launch_s == pytest.approx(0.5)
    assert got.after_s == pytest.approx(10.0, abs=0.01)
    assert got.measured == ("job", "link check", "launch", "report")
    assert got.sweep_s is None  # no sweep ran: its settings say how long one takes
    parts = estimate.expected_seconds(parsed(config), every(config), got.launch_s, got)
    links = sum(len(spec["links"]) for spec in config["pairs"].values())
    assert parts["links"] == pytest.approx(links * (1.1 + 20.0))
    assert parts["report"] == pytest.approx(10.0, abs=0.01)
    assert parts["setup"] == pytest.approx(1.1 * (len(config["pairs"]) + len(config["models"])))


def test_a_runs_sweeps_give_a_sweeps_time(tmp_path, config):
    """A delay sweep launches a worker per point and sends its requests: 7.3 s on the
    default against 4.2 s its settings give. The median of the run's sweep jobs stands
    in for the settings' count."""
    base = 1_800_000_000 * 10**9
    _job_log(tmp_path, "links/t/plain", 0.0, 20.0, base)
    _job_log(tmp_path, "roundtrips/t/tiny/w1", 21.0, 28.0, base)
    _job_log(tmp_path, "roundtrips/t/tiny/w2", 29.0, 38.0, base)
    got = estimate.overheads_from(tmp_path)
    assert got.sweep_s == pytest.approx(8.0)
    assert "sweep" in got.measured
    config["roundtrips"] = {"workers": [1], "delays_ms": [0.0, 1.0]}
    parts = estimate.expected_seconds(parsed(config), every(config), got.launch_s, got)
    sweeps = len(plan.roundtrip_sweeps(parsed(config)))
    assert sweeps >= 1
    assert parts["roundtrips"] == pytest.approx(sweeps * (got.job_s + 8.0))


def test_without_job_logs_the_overheads_are_assumed(tmp_path):
    assert estimate.overheads_from(tmp_path) == estimate.Overheads()
    _job_log(tmp_path, "links/t/plain", 0.0, 20.0, 10**18)  # one job: no gap to read
    assert estimate.overheads_from(tmp_path) == estimate.Overheads()
