"""Service levels (summary/service_levels.py): which requests meet `slo:`, each cell's
share and goodput, and per link and context the most streams that hold it."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from splitbench.configuration import ConfigError, parsed
from splitbench.findings import service_levels as level_findings
from splitbench.infra import intervals
from splitbench.report import tails
from splitbench.summary import percentiles, service_levels
from tests.conftest import tiny_config
from tests.support import write_cell
from tests.support.matrices import request

SLO = {"ttft_ms": 500.0, "tokens_per_s": 20.0, "share_pct": 90.0}


def cell(conc: int, met: int, link: str = "usb4", status: str = "ok", requests: int = 40,
         releases: int | None = None) -> dict:
    """One constructed cell's row of service_levels.table: `met` of `requests` (40: 40
    holds 90%, 24 fails it, 38 is not resolvable), judged as the table judges it."""
    return {"pair": "lab", "link": link, "model": "m", "ctx": "5k", "conc": conc,
            "requests": requests, "met": met,
            **service_levels.judged(met, requests, 90.0, releases), "releases": releases,
            "goodput_rps": 1.0, "status": status}


def span(met: int, total: int) -> tuple[float, float]:
    """The share's exact interval in %, as the table records it."""
    low, high = intervals.share_interval(met, total)
    return 100 * low, 100 * high


def smallest_resolving(met: int, total: int, start: int | None = None,
                       floor: bool = False) -> int:
    """The brute-force count that units_needed searches for: the first n above `start`
    (`total` unless given) whose interval of the share `met` / `total` of n (rounded
    half up, or down with `floor`) lies wholly above or below 90%."""
    level, n = 0.9, total if start is None else start
    while True:
        n += 1
        share = Fraction(met, total) * n
        k = math.floor(share) if floor else math.floor(share + Fraction(1, 2))
        low, high = intervals.share_interval(k, n)
        if low >= level or high < level:
            return n


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
    assert (row["requests"], row["met"], row["met_pct"]) == (4, 1, 25.0)
    # 1 of 4: at most 81% would meet it, below the 90% asked: the cell fails, resolved.
    assert (row["met_low_pct"], row["met_high_pct"]) == pytest.approx(span(1, 4))
    assert row["met_high_pct"] == pytest.approx(80.59, abs=0.01)
    assert (row["verdict"], row["holds"]) == ("fails", False)
    assert pd.isna(row["requests_needed"])
    # One stream, rows without their release: judged on the requests.
    assert row["sample_unit"] == "requests" and pd.isna(row["releases"])
    # Goodput: 1 met request over the 1.08 s from the first send to the last token (the
    # slow request's 900 ms + 9 x 20 ms); its ± the share's wider side (55.6 points, up
    # to 80.6% from 25%) times the 4 requests per 1.08 s.
    assert row["goodput_rps"] == pytest.approx(1 / 1.08)
    assert row["goodput_rps_unc"] == pytest.approx(
        (row["met_high_pct"] - 25.0) / 100 * 4 / 1.08)
    # What the slowest of the share would need: a failed request stays within nothing,
    # so 90% of four (the fourth) is unbounded; half of them stay within 20 ms a token.
    assert row["step_at_share_ms"] == float("inf") and row["share_pct"] == 90.0
    (half,) = service_levels.table([path], {**SLO, "share_pct": 50.0}).to_dict("records")
    assert half["step_at_share_ms"] == pytest.approx(20.0, rel=0.01)
    assert half["ttft_at_share_ms"] == pytest.approx(100.0, rel=0.01)
    assert half["tokens_per_s_target"] == 20.0
    # Its ± is unbounded: about one resample in twenty draws the crashed request three
    # or four times, and then the second of four steps is the crash's.
    assert half["step_at_share_se"] == float("inf")
    # At 50%, 1 of 4 is neither shown above nor below it.
    assert half["verdict"] == "not resolvable" and pd.isna(half["holds"])
    # No target set: no table.
    assert service_levels.table([path], {"share_pct": 90}).empty


def test_the_value_at_a_share_has_the_spread_of_its_resamples():
    """at_share's standard error is the spread of the share's value over resamples of
    the requests, worked out here one resample at a time."""
    steps = np.array([10.0, 20.0, 30.0, 40.0, 55.0, 70.0])
    value, se = service_levels.at_share(pd.Series(steps), 50.0, seed=3)
    picks = np.random.default_rng(3).integers(0, 6, (percentiles.BOOTSTRAP_DRAWS, 6))
    draws = [np.percentile(steps[p], 50, method="inverted_cdf") for p in picks]
    assert value == 30.0
    assert se == pytest.approx(np.std(draws, ddof=1))
    # One request: nothing to resample.
    assert math.isnan(service_levels.at_share(pd.Series([12.0]), 50.0)[1])


def test_a_cell_holds_fails_or_is_not_resolvable_by_its_interval():
    """Every met is not a held level: 35 of 35 show only 89.99%, 36 of 36 show 90.26%."""
    held = service_levels.judged(36, 36, 90.0)
    assert (held["verdict"], held["holds"], held["requests_needed"]) == ("holds", True, None)
    assert held["met_low_pct"] == pytest.approx(100 * 0.025 ** (1 / 36))
    assert held["met_low_pct"] == pytest.approx(90.26, abs=0.01)
    short = service_levels.judged(35, 35, 90.0)
    assert (short["verdict"], short["holds"]) == ("not resolvable", None)
    assert short["met_pct"] == 100.0 and short["met_low_pct"] == pytest.approx(89.99, abs=0.01)
    assert short["requests_needed"] == 36  # intervals.requests_to_show(0.9)
    # Five of five, as a review found them: at least 48% would meet it, no more.
    five = service_levels.judged(5, 5, 90.0)
    assert five["met_low_pct"] == pytest.approx(47.82, abs=0.01)
    assert (five["verdict"], five["requests_needed"]) == ("not resolvable", 36)
    # 6 of 10: at most 88% would, below the level: it fails.
    failed = service_levels.judged(6, 10, 90.0)
    assert (failed["verdict"], failed["holds"]) == ("fails", False)
    assert failed["met_high_pct"] == pytest.approx(87.84, abs=0.01)


def test_the_requests_needed_at_the_observed_share():
    """At an observed share below one, the first count whose interval of the share's
    requests lies wholly on one side of the level; at the level itself, none."""
    above = service_levels.judged(19, 20, 90.0)  # 95%: shown above 90% at some n
    assert above["verdict"] == "not resolvable"
    assert above["requests_needed"] == smallest_resolving(19, 20)
    assert 100 < above["requests_needed"] < 400
    n = above["requests_needed"]
    low, _ = intervals.share_interval(math.floor(Fraction(19, 20) * n + Fraction(1, 2)), n)
    assert low >= 0.9
    below = service_levels.judged(8, 10, 90.0)  # 80%: shown below 90% at some n
    assert below["verdict"] == "not resolvable"
    assert below["requests_needed"] == smallest_resolving(8, 10)
    assert 30 < below["requests_needed"] < 100
    # 23 of 25 (92%) is shown above 90% only past the counts walked one by one: found
    # by halving, to within a tooth of the saw.
    close = service_levels.units_needed(23, 25, 90.0)
    assert close > 25 + service_levels.SCANNED
    k = math.floor(Fraction(23, 25) * close + Fraction(1, 2))
    assert intervals.share_interval(k, close)[0] >= 0.9
    assert 500 < close < 1000
    # Exactly at the level, or a level of 100%: no number of requests resolves it.
    assert service_levels.judged(9, 10, 90.0)["requests_needed"] is None
    assert service_levels.judged(10, 10, 100.0)["requests_needed"] is None
    assert service_levels.units_needed(0, 0, 90.0) is None


def releases_cell(tmp_path, conc: int, shots: list[int], met: list[bool]) -> str:
    """A cell's requests file: one row per request, in release `shots[i]`, meeting the
    level (20 ms a token: 50 tokens/s) or not (100 ms: 10 tokens/s)."""
    rows = [request(i, [20.0 if ok else 100.0] * 9, send_ns=int(1e9) * shot,
                    ttft_ms=100.0, shot=shot, round=0, reference=False)
            for i, (shot, ok) in enumerate(zip(shots, met, strict=True))]
    return write_cell(tmp_path, "usb4", "5k", conc, rows)


def test_a_concurrent_cell_is_judged_on_its_releases_not_its_requests(tmp_path):
    """5 of 6 requests in 3 two-way releases: judged as 2 of 3 releases (floor(3 x 5/6)),
    not as 5 of 6 requests; its share stays the requests'."""
    path = releases_cell(tmp_path, 2, [0, 0, 1, 1, 2, 2], [True] * 5 + [False])
    (row,) = service_levels.table([path], SLO).to_dict("records")
    assert (row["requests"], row["met"], row["releases"]) == (6, 5, 3)
    assert row["sample_unit"] == "releases"
    assert row["met_pct"] == pytest.approx(100 * 5 / 6)
    assert (row["met_low_pct"], row["met_high_pct"]) == pytest.approx(span(2, 3))
    assert (row["met_low_pct"], row["met_high_pct"]) != pytest.approx(span(5, 6))
    assert row["verdict"] == "not resolvable"
    (shown,) = tails.service_levels_table(service_levels.table([path], SLO),
                                          ["5k"]).to_dict("records")
    assert (shown["judged on"], shown["95% interval (%)"]) == ("3 releases", "9–100")
    # Every one of 10 met, in 5 releases: 5 of 5 at the release count (48%, not the
    # requests' 69%); 36 releases would show 90%, 72 requests at two a release.
    path = releases_cell(tmp_path, 2, [0, 0, 1, 1, 2, 2, 3, 3, 4, 4], [True] * 10)
    (row,) = service_levels.table([path], SLO).to_dict("records")
    assert row["met_low_pct"] == pytest.approx(span(5, 5)[0])
    assert row["met_low_pct"] == pytest.approx(47.82, abs=0.01)
    assert row["requests_needed"] == 72
    # One stream: its requests are the sample, whatever releases they were sent in.
    path = releases_cell(tmp_path, 1, list(range(10)), [True] * 10)
    (row,) = service_levels.table([path], SLO).to_dict("records")
    assert (row["sample_unit"], row["releases"]) == ("requests", 10)
    assert row["met_low_pct"] == pytest.approx(span(10, 10)[0])
    assert row["requests_needed"] == 36


def test_goodput_carries_the_shares_interval_times_the_requests_per_second(tmp_path):
    """Ten requests a second apart, over 10.1 s of measuring (the last 1.1 s to its
    end), nine met: goodput 9 / 10.1 s, its ± the share's interval on its wider side
    (below: 55.5% against 90%) times 10 / 10.1 requests per second."""
    rows = [request(i, [20.0 if i else 100.0] * 50, send_ns=int(1e9) * i, ttft_ms=100.0,
                    reference=False) for i in range(10)]
    path = write_cell(tmp_path, "usb4", "5k", 1, rows)
    (row,) = service_levels.table([path], SLO).to_dict("records")
    seconds = (rows[-1]["t_last_ns"] - rows[0]["t_send_ns"]) / 1e9
    assert row["goodput_rps"] == pytest.approx(9 / seconds)
    low, high = span(9, 10)
    assert 90.0 - low > high - 90.0  # the wider side is below
    assert row["goodput_rps_unc"] == pytest.approx((90.0 - low) / 100 * 10 / seconds)
    assert seconds == pytest.approx(10.1)
    assert row["goodput_rps_unc"] == pytest.approx(0.345 * 10 / 10.1, abs=1e-3)


def test_held_at_every_level_at_none_and_up_to_a_crash():
    assert level_findings.held_streams(pd.DataFrame([cell(1, 40), cell(2, 40),
                                                     cell(4, 40)])) == \
        ("holds all 4 measured streams", None)
    assert level_findings.held_streams(pd.DataFrame([cell(1, 24), cell(2, 24)])) == \
        ("holds none; 1 stream fails", "at 1 stream: 24 of 40 met, 95% interval 43–76%")
    crashed = pd.DataFrame([cell(1, 40), cell(2, 40), cell(4, 24, status="crash")])
    assert level_findings.held_streams(crashed) == \
        ("holds 2 streams (at 4 streams it ended crash)", None)
    # A level that holds above one that does not: the streams that hold are those below.
    gap = pd.DataFrame([cell(1, 40), cell(2, 24), cell(4, 40)])
    assert level_findings.held_streams(gap) == \
        ("holds 1 stream; 2 streams fail", "at 2 streams: 24 of 40 met, 95% interval 43–76%")


def test_a_level_not_resolvable_is_said_with_its_counts_and_what_would_resolve_it():
    """The review's case: 10 of 10 at one stream and 5 of 6 at two once read "holds 2
    streams" against "holds 1"; neither is shown at 90%."""
    few = pd.DataFrame([cell(1, 10, requests=10), cell(2, 10, requests=10)])
    assert level_findings.held_streams(few) == (
        "is not resolvable at 1 stream", "at 1 stream: 10 of 10 met, 95% interval "
        "69–100%; about 36 requests would resolve it")
    # Above a level that holds, two streams judged on their three releases.
    mixed = pd.DataFrame([cell(1, 40), cell(2, 5, requests=6, releases=3)])
    needed = int(mixed.loc[1, "requests_needed"])
    assert needed == math.ceil(smallest_resolving(5, 6, 3, floor=True) * 6 / 3)
    assert level_findings.held_streams(mixed) == (
        "holds 1 stream; 2 streams not resolvable", "at 2 streams: 5 of 6 requests "
        f"met; as 2 of 3 releases, 95% interval 9–100%; about {needed} requests would "
        "resolve it")
    # A share exactly at the level: more requests at it would not resolve it.
    level = pd.DataFrame([cell(1, 36, requests=40)])
    assert level_findings.held_streams(level)[1].endswith(
        "no number of requests at this share would resolve it")


def test_the_finding_names_each_link_per_context_baseline_first():
    levels = pd.DataFrame([cell(1, 40, "usb4"), cell(2, 40, "usb4"), cell(4, 24, "usb4"),
                           cell(1, 40, "5gbe"), cell(2, 40, "5gbe"), cell(4, 40, "5gbe")])
    ((ctx, found),) = level_findings.findings(levels, ["short", "5k"], SLO, "m", "5gbe")
    assert ctx == "5k"
    assert found.markdown() == ("**At 5k, within 500 ms to first token and 20 tokens/s per stream "
                          "for 90% of requests: 5gbe holds all 4 measured streams and usb4 "
                          "holds 2 streams; 4 streams fail**. Each first level not held, "
                          "usb4 at 4 streams: 24 of 40 met, 95% interval 43–76%.")


def test_the_table_shows_the_interval_and_the_verdict_and_its_title_says_what_it_is():
    levels = pd.DataFrame([cell(1, 40), cell(2, 38), cell(4, 24)]).assign(
        goodput_rps_unc=0.25)
    shown = tails.service_levels_table(levels, ["5k"]).to_dict("records")
    assert [r["verdict"] for r in shown] == ["✓ holds", "not resolvable (about "
                                             f"{int(levels.loc[1, 'requests_needed'])} "
                                             "requests)", "✗ fails"]
    assert [r["95% interval (%)"] for r in shown] == ["91–100", "83–100", "43–76"]
    assert shown[0]["goodput (req/s)"] == "1.00 ±0.25"
    assert shown[0]["judged on"] == "requests"
    title = tails.service_levels_title(SLO)
    assert "95% exact binomial (Clopper-Pearson) interval" in title
    assert "not resolvable" in title and "goodput" in title


def test_a_service_level_out_of_bounds_is_refused_by_its_key():
    config = tiny_config()
    config["slo"] = {"ttft_ms": 500, "share_pct": 120}
    with pytest.raises(ConfigError, match="slo.share_pct"):
        parsed(config)
