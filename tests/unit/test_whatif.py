"""What if my link were X: the prediction's arithmetic on constructed data, and the
command a person types."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from splitbench import cli
from splitbench.compare import whatif
from splitbench.contracts import results
from splitbench.infra import intervals


def summary_and_links() -> tuple[pd.DataFrame, pd.DataFrame]:
    summary = pd.DataFrame([{
        "pair": "lab", "link": "base", "model": "m", "ctx": "short", "conc": 1,
        "status": "ok", "decode_ms_per_token": 1.0, "decode_ms_se": 0.01,
        "rpc_bytes_per_token_a_to_b": 4000.0, "rpc_bytes_per_token_b_to_a": 8000.0}])
    links = pd.DataFrame([
        {"pair": "lab", "link": "base", "rr64_p50_us": 50.0, "a_to_b_gbps": 10.0,
         "b_to_a_gbps": 10.0},
        {"pair": "lab", "link": "slow", "rr64_p50_us": 300.0, "a_to_b_gbps": 1.0,
         "b_to_a_gbps": 1.0}])
    return summary, links


TRIPS = pd.DataFrame([{"pair": "lab", "model": "m", "workers": 1, "round_trips": 1.0,
                       "round_trips_se": 0.02, "round_trips_from": "the delay sweep"}])


def test_the_prediction_is_compute_plus_round_trips_times_latency_plus_wire_time():
    summary, links = summary_and_links()
    rows = whatif.model(summary, links, TRIPS, {"m": 1}, "base")
    # wire on the baseline: 12,000 B at 10 Gbit/s = 0.0096 ms; latency 1 x 50 µs
    assert rows.loc[0, "compute_ms"] == pytest.approx(1.0 - 0.05 - 0.0096)
    out = whatif.predict(rows, 300, 1.0).iloc[0]
    # 0.9404 + 1 x 0.300 + 12,000 B at 1 Gbit/s (0.096 ms)
    assert out["predicted_ms"] == pytest.approx(1.3364)
    assert out["predicted_tps"] == pytest.approx(1000 / 1.3364)
    # ± = 1.96 x hypot(0.01, 0.02 x 0.250 ms): a 95% interval, the normal quantile
    assert out["predicted_unc_ms"] == pytest.approx(
        intervals.t_factor(np.inf) * np.hypot(0.01, 0.005))
    # At the baseline's own latency and rates the prediction is the measured step.
    assert whatif.predict(rows, 50, 10.0).iloc[0]["predicted_ms"] == pytest.approx(1.0)


def test_without_a_sweep_the_round_trips_are_the_floor_and_say_so():
    summary, links = summary_and_links()
    rows = whatif.model(summary, links, TRIPS.iloc[0:0], {"m": 2}, "base")
    assert rows.loc[0, "round_trips"] == 2
    assert rows.loc[0, "round_trips_from"].startswith("assumed: the floor")


def test_the_flat_region_is_where_the_links_round_trips_are_a_small_share():
    summary, links = summary_and_links()
    row = whatif.model(summary, links, TRIPS, {"m": 1}, "base").iloc[0]
    assert whatif.felt_above_us(row) == pytest.approx(0.05 * row["compute_ms"] * 1000)


def test_a_point_off_its_prediction_is_off_curve():
    summary, links = summary_and_links()
    rows = whatif.model(summary, links, TRIPS, {"m": 1}, "base")
    comp = pd.DataFrame([
        {"pair": "lab", "model": "m", "ctx": "short", "link": link, "status": "ok",
         "status_base": "ok", "decode_delta_ms": measured, "decode_delta_unc_ms": 0.02,
         "predicted_decode_delta_ms": 0.336, "predicted_decode_delta_unc_ms": 0.02,
         "latency_delta_us": 250.0} for link, measured in (("slow", 0.34), ("odd", 0.60))])
    points = whatif.measured_points(rows, comp).set_index("link")
    assert not points.loc["slow", "off_curve"]
    assert points.loc["odd", "off_curve"]
    assert points.loc["slow", "rtt_us"] == pytest.approx(300.0)


def test_the_command_predicts_from_a_runs_results(tmp_path, capsys):
    summary, links = summary_and_links()
    rows = whatif.model(summary, links, TRIPS, {"m": 1}, "base")
    whatif.write(rows, pd.DataFrame(), results.under(tmp_path, results.WHATIF),
                 results.under(tmp_path, results.WHATIF_POINTS))
    link = Path(results.under(tmp_path, results.link("lab", "slow")))
    link.parent.mkdir(parents=True)
    links.iloc[[1]].to_parquet(link)
    assert cli.main(["whatif", "--rtt-us", "300", "--gbit", "1",
                     "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1.336 ±0.022" in out and "748.3" in out
    assert cli.main(["whatif", "--like", "slow", "--results", str(tmp_path)]) == 0
    assert "1.336" in capsys.readouterr().out
    # A link this run did not measure, and a run with no results: an error line each.
    assert cli.main(["whatif", "--like", "fast", "--results", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: --like fast: no link of that name")
    assert cli.main(["whatif", "--like", "slow", "--results", str(tmp_path / "no")]) == 2
    assert capsys.readouterr().err.startswith("error: no what-if model at")


def test_without_a_sweep_the_cells_counted_round_trips_are_used_and_named():
    """A pair with no sweep (any real pair): the turns counted in its own single-stream
    cells' RPC packets stand in, named as such; a resolvable sweep wins where there is
    concurrent and failed cells count for nothing."""
    from splitbench.compare import comparison

    summary = pd.DataFrame([
        {"pair": "rig", "model": "m", "rpc_workers": 1, "conc": 1, "status": "ok",
         "rpc_turns_per_token": turns} for turns in (1.0, 1.02, 0.98)] + [
        {"pair": "rig", "model": "m", "rpc_workers": 1, "conc": 4, "status": "ok",
         "rpc_turns_per_token": 0.3},
        {"pair": "rig", "model": "m", "rpc_workers": 1, "conc": 1, "status": "crash",
         "rpc_turns_per_token": 9.0},
        {"pair": "lab", "model": "m", "rpc_workers": 1, "conc": 1, "status": "ok",
         "rpc_turns_per_token": 1.5}])
    trips = comparison.round_trips([], summary)
    rig = trips[trips["pair"] == "rig"].iloc[0]
    assert rig["round_trips"] == pytest.approx(1.0)
    assert rig["round_trips_from"] == "counted from the RPC packets"
    assert 0 < rig["round_trips_se"] < 0.05
    assert trips[trips["pair"] == "lab"].iloc[0]["round_trips"] == 1.5
    # The what-if names where its round trips came from.
    cells, links = summary_and_links()
    rows = whatif.model(cells, links, trips, {"m": 1}, "base")
    assert rows.loc[0, "round_trips"] == 1.5
    assert rows.loc[0, "round_trips_from"] == "counted from the RPC packets"


def test_the_latency_bound_is_where_the_predicted_stream_meets_the_target(tmp_path, capsys):
    summary, links = summary_and_links()
    rows = whatif.model(summary, links, TRIPS, {"m": 1}, "base")
    bound = whatif.latency_bound(rows, 800.0).iloc[0]
    # 1.25 ms a token allowed, less 0.9404 compute and the baseline's 0.0096 wire: 300 µs.
    assert bound["bound_us"] == pytest.approx(300.0)
    at_bound = whatif.predict(rows, bound["bound_us"]).iloc[0]["predicted_tps"]
    assert at_bound == pytest.approx(800.0)
    # ± = 1.96 x hypot(0.01 ms / 1, 300 µs x 0.02 / 1)
    assert bound["bound_unc_us"] == pytest.approx(
        intervals.t_factor(np.inf) * np.hypot(10.0, 6.0))
    # At 1 Gbit/s the wire takes 0.096 ms of the budget; a target compute alone misses.
    assert whatif.latency_bound(rows, 800.0, 1.0).iloc[0]["bound_us"] == \
        pytest.approx(300.0 - 86.4)
    assert whatif.latency_bound(rows, 2000.0).iloc[0]["bound_us"] < 0
    whatif.write(rows, pd.DataFrame(), results.under(tmp_path, results.WHATIF),
                 results.under(tmp_path, results.WHATIF_POINTS))
    assert cli.main(["whatif", "--tokens-per-s", "800", "--results", str(tmp_path)]) == 0
    assert "300 ±23 µs" in capsys.readouterr().out
    assert cli.main(["whatif", "--tokens-per-s", "2000", "--results", str(tmp_path)]) == 0
    assert "none: compute and wire alone are slower" in capsys.readouterr().out


def test_the_slo_bound_holds_the_slowest_of_the_share_to_the_target(tmp_path, capsys):
    """`whatif --slo` predicts from the baseline's step that the level's share of its
    requests stay within (1.2 ms here, not the 1.0 ms median): the 1.25 ms a token
    that 800 tokens/s allows leaves 0.1 ms of latency for its one round trip."""
    summary, links = summary_and_links()
    rows = whatif.model(summary, links, TRIPS, {"m": 1}, "base")
    levels = pd.DataFrame([{"pair": "lab", "link": "base", "model": "m", "ctx": "short",
                            "conc": 1, "step_at_share_ms": 1.2, "step_at_share_se": 0.02,
                            "ttft_at_share_ms": 40.0, "tokens_per_s_target": 800.0,
                            "ttft_ms_target": 500.0, "share_pct": 90.0}])
    held = whatif.at_share(rows, levels)
    assert held.loc[0, "compute_ms"] == pytest.approx(1.2 - 0.05 - 0.0096)
    bound = whatif.latency_bound(held, 800.0).iloc[0]
    assert bound["bound_us"] == pytest.approx(100.0)
    whatif.write(rows, pd.DataFrame(), results.under(tmp_path, results.WHATIF),
                 results.under(tmp_path, results.WHATIF_POINTS))
    path = Path(results.under(tmp_path, results.SERVICE_LEVELS))
    levels.to_parquet(path)
    assert cli.main(["whatif", "--slo", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "at which 90% of one stream's requests still decode 800 tokens/s" in out
    assert "100 ±39 µs" in out and "40 ms (500)" in out, out
    # A run without a tokens/s level says what to give instead.
    levels.assign(tokens_per_s_target=np.nan).to_parquet(path)
    assert cli.main(["whatif", "--slo", "--results", str(tmp_path)]) == 2
    assert "no tokens/s level" in capsys.readouterr().err


def test_the_slo_bound_says_where_its_share_rests_on_too_few_requests(tmp_path, capsys):
    """The step 90% of the baseline's requests stay within, from 10 of them: even all
    ten within it show only that 69% would be (95% exact interval); 36 could show 90%.
    Before, the bound was printed as if the share were known."""
    summary, links = summary_and_links()
    rows = whatif.model(summary, links, TRIPS, {"m": 1}, "base")
    whatif.write(rows, pd.DataFrame(), results.under(tmp_path, results.WHATIF),
                 results.under(tmp_path, results.WHATIF_POINTS))
    levels = pd.DataFrame([{"pair": "lab", "link": "base", "model": "m", "ctx": "short",
                            "conc": 1, "step_at_share_ms": 1.2, "step_at_share_se": 0.02,
                            "ttft_at_share_ms": 40.0, "tokens_per_s_target": 800.0,
                            "ttft_ms_target": 500.0, "share_pct": 90.0, "requests": 10}])
    assert whatif.share_resolved(10, 90.0) is False
    assert whatif.share_resolved(35, 90.0) is False and whatif.share_resolved(36, 90.0)
    assert whatif.share_resolved(np.nan, 90.0) is None
    path = Path(results.under(tmp_path, results.SERVICE_LEVELS))
    levels.to_parquet(path)
    assert cli.main(["whatif", "--slo", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "100 ±" in out, out  # the bound itself, as before
    assert ("not resolved: lab/m/short rests on the baseline's 10 requests; even 10 of 10 "
            "within a step show only that 69% stay within it (95% interval), not 90%: "
            "about 36 requests would") in out, out
    levels.assign(requests=36).to_parquet(path)
    assert cli.main(["whatif", "--slo", "--results", str(tmp_path)]) == 0
    assert "not resolved" not in capsys.readouterr().out


def test_a_prediction_from_a_flagged_baseline_cell_says_so(tmp_path, capsys):
    """Beside two CPU hogs the baseline cells were flagged and `whatif --slo` printed
    its bounds as if they were clean."""
    summary, links = summary_and_links()
    rows = whatif.model(summary, links, TRIPS, {"m": 1}, "base")
    whatif.write(rows, pd.DataFrame(), results.under(tmp_path, results.WHATIF),
                 results.under(tmp_path, results.WHATIF_POINTS))
    busy = "hosts A and B: other processes used 1.24 cores (limit 0.25 cores) during the cell"
    path = Path(results.under(tmp_path, results.SUMMARY))
    summary.assign(flags=None).to_parquet(path)
    assert cli.main(["whatif", "--tokens-per-s", "800", "--results", str(tmp_path)]) == 0
    assert "⚠" not in capsys.readouterr().out
    summary.assign(flags=busy).to_parquet(path)
    assert cli.main(["whatif", "--tokens-per-s", "800", "--results", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(
        f"⚠ flagged: the baseline cell lab/base/m/short this rests on ({busy})\n")
