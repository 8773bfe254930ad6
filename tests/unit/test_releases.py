"""Concurrent cells that estimate their own spread: a cell of N streams releases its N
requests several times (cells.stopping.more_shots), and the summary takes its overlap,
throughput and decode as medians over the releases, with a ± from their spread; the
tables show it, flag impossible overlaps beyond it and name overlaps that are not
resolvable; a level where one release failed is not usable."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from splitbench.backends import metrics
from splitbench.backends.client import Reply
from splitbench.cells import measure, stopping
from splitbench.configuration import parsed
from splitbench.infra import intervals
from splitbench.matrix import plan
from splitbench.report import charts, tables
from splitbench.summary import cell_summary, releases
from tests.support import write_cell
from tests.support.matrices import release_request

CONTEXTS = {"short": 128, "long": 4096}
ORDER = ["short", "long"]
MEDIAN_SE = 1.2533


# ---------------------------------------------------------------- releases sent


def concurrent(**settings) -> dict:
    return {"concurrency": 4, "concurrent_releases": 3, "concurrent_seconds": 2.0,
            # a single stream's keys must not steer a concurrent cell
            "single_stream_requests": 50, "single_stream_seconds": 100.0} | settings


def test_a_concurrent_cell_releases_at_least_its_minimum_then_while_under_its_time():
    cell = concurrent()
    assert stopping.more_shots(cell, 0, 0.0)
    assert stopping.more_shots(cell, 2, 30.0)  # below the minimum, however long it took
    assert stopping.more_shots(cell, 3, 1.9)  # the minimum sent, under 2 s: again
    assert not stopping.more_shots(cell, 3, 2.0)
    assert not stopping.more_shots(cell, 7, 2.5)
    # An expensive release is not repeated beyond the minimum.
    assert not stopping.more_shots(concurrent(concurrent_seconds=0.0), 3, 0.1)
    # Without the keys (an old slice): one release, as before.
    assert not stopping.more_shots({"concurrency": 2}, 1, 0.0)
    # A single stream reads only its own keys.
    single = concurrent(concurrency=1, single_stream_requests=2, single_stream_seconds=0.5)
    assert stopping.more_shots(single, 1, 9.0) and not stopping.more_shots(single, 2, 0.6)


class FakeBackend:
    """Streams every release at once on a fake clock: each release takes `release_s`;
    release number `fail_at` (1-based) has one request answered 500."""

    def __init__(self, clock: list[float], release_s: float, fail_at: int | None = None):
        self.clock, self.release_s, self.fail_at = clock, release_s, fail_at
        self.releases = 0

    def prompt_pool(self, url):
        return None

    def prompt(self, pool, tokens, seed):
        return [1] * tokens

    def traffic(self, link, server):
        return FakeTraffic()

    def stream(self, url, batch, n_predict, timeout_s, at_first_token):
        self.releases += 1
        self.clock[0] += self.release_s
        replies = [Reply(request_id=i, http_status=200,
                         tokens=[{"t_ns": k, "t_mono_ns": k} for k in range(n_predict)])
                   for i in range(len(batch))]
        if self.releases == self.fail_at:
            replies[1].http_status, replies[1].error_type = 500, "server_error"
        return replies


class FakeTraffic:
    def at_first_token(self, *_):
        return None

    def finish(self):
        return None


def drive(monkeypatch, cell: dict, release_s: float, fail_at: int | None = None):
    clock = [0.0]
    backend = FakeBackend(clock, release_s, fail_at)
    monkeypatch.setattr(measure, "backend_of", lambda c: backend)
    monkeypatch.setattr(measure.time, "monotonic", lambda: clock[0])
    link = SimpleNamespace(host_a=SimpleNamespace(entered=contextlib.nullcontext),
                           pair="lab", name="x")
    cell = {"prompt_tokens": 8, "n_predict": 4, "request_timeout_s": 5.0} | cell
    shots, _ = measure._drive(cell, link, SimpleNamespace(url="http://a"))
    return shots, backend


def test_drive_releases_the_n_requests_as_more_shots_says(monkeypatch):
    # 0.3 s a release, at least 3, more while under 1 s: after 3 it has run 0.9 s, so a
    # fourth; after 4, 1.2 s: done.
    shots, backend = drive(monkeypatch, concurrent(concurrent_seconds=1.0), 0.3)
    assert backend.releases == len(shots) == 4
    assert all(len(replies) == 4 for replies, _ in shots)
    # A 32k-like release (seconds each) stops at the minimum.
    shots, _ = drive(monkeypatch, concurrent(concurrent_seconds=1.0), 5.0)
    assert len(shots) == 3


def test_after_a_release_with_a_failed_request_the_rest_are_not_sent(monkeypatch):
    shots, backend = drive(monkeypatch, concurrent(concurrent_releases=5), 0.1, fail_at=2)
    assert backend.releases == len(shots) == 2
    assert shots[-1][0][1].http_status == 500


def test_each_release_has_its_own_wall_time_and_throughput():
    def row(shot, send_ms, last_ms, tokens=10, reference=False):
        return {"reference": reference, "round": 0, "shot": shot,
                "t_send_ns": int(send_ms * 1e6), "t_last_ns": int(last_ms * 1e6),
                "t_end_ns": int(last_ms * 1e6), "generated_tokens": tokens}

    rows = [row(0, 0, 100), row(0, 1, 150), row(1, 200, 260), row(1, 201, 240)]
    figures = metrics.release_figures(rows)
    assert figures[(False, 0, 0)]["release_wall_ms"] == pytest.approx(150.0)
    assert figures[(False, 0, 1)]["release_wall_ms"] == pytest.approx(60.0)
    assert figures[(False, 0, 1)]["release_throughput_tps"] == pytest.approx(20 / 0.060)
    # The cell-wide wall time spans both releases.
    assert metrics.wall_ms(rows) == pytest.approx(260.0)


def test_only_concurrent_cells_carry_the_release_keys_and_only_singles_theirs():
    config = plan.read_yaml(Path(__file__).resolve().parents[2] / "config/config.yaml")
    single = plan.cell_slice(parsed(config), plan.Cell("lab", "5gbe", "synth", "short", 1))
    many = plan.cell_slice(parsed(config), plan.Cell("lab", "5gbe", "synth", "short", 2))
    assert "concurrent_releases" not in single and "single_stream_requests" in single
    assert many["concurrent_releases"] == config["cell"]["concurrent_releases"]
    assert many["concurrent_seconds"] == config["cell"]["concurrent_seconds"]
    assert "single_stream_requests" not in many


# ---------------------------------------------------------------- the summary




def single_cell(tmp_path: Path, walls: list[float], link: str = "a") -> str:
    rows = [release_request(i, shot=i, send_ms=1000.0 * i, wall_ms=w) for i, w in enumerate(walls)]
    return write_cell(tmp_path, link, "short", 1, rows)


def two_way_cell(tmp_path: Path, walls: list[float], decode: list[float] | None = None,
                 link: str = "a", **extra) -> str:
    """A 2-way cell, one release per wall time, each with its own requests' decode."""
    decode = decode or [10.0] * len(walls)
    rows = []
    for k, (wall, ms) in enumerate(zip(walls, decode, strict=True)):
        for i in range(2):
            tokens = 10
            rows.append(release_request(2 * k + i, shot=k, send_ms=1000.0 * k + i * 0.01,
                                wall_ms=wall - i * 0.01, decode_ms=ms,
                                release_throughput_tps=2 * tokens / (wall / 1000), **extra))
    return write_cell(tmp_path, link, "short", 2, rows)


def test_overlap_throughput_and_decode_of_a_concurrent_cell_come_from_its_releases(tmp_path):
    """T1 = 100 ms exactly (every single request alike), so each release's overlap is
    (2 x 100 - W) / 100 and its ± is the spread of the releases alone."""
    overlaps = np.array([0.5, 0.6, 0.7, 0.8, 0.9])
    walls = list(200 - 100 * overlaps)
    decode = [10.0, 11.0, 12.0, 13.0, 14.0]
    files = [single_cell(tmp_path, [100.0] * 5), two_way_cell(tmp_path, walls, decode)]
    summary = cell_summary.summarize(files, CONTEXTS).set_index("conc")
    row = summary.loc[2]
    assert row["releases"] == 5
    assert row["overlap"] == pytest.approx(0.7)
    se = MEDIAN_SE * np.std(overlaps, ddof=1) / np.sqrt(5)
    assert row["overlap_se"] == pytest.approx(se)
    # A 95% interval: t at the 5 releases' 4 degrees of freedom.
    assert row["overlap_unc"] == pytest.approx(intervals.t_factor(4) * se)
    # Each release's own wall time, not the span of all five (about 4.1 s).
    assert row["wall_ms"] == pytest.approx(130.0)
    throughput = 20 / (np.array(walls) / 1000)
    assert row["throughput_tps"] == pytest.approx(np.median(throughput))
    assert row["throughput_tps_unc"] == pytest.approx(
        intervals.t_factor(4) * MEDIAN_SE * np.std(throughput, ddof=1) / np.sqrt(5))
    # Decode's ± from the releases' medians, not the per-token floor.
    assert row["uncertainty_from"] == "releases" and row["samples"] == 5
    assert row["decode_ms_se"] == pytest.approx(
        MEDIAN_SE * np.std(decode, ddof=1) / np.sqrt(5))
    # The single stream: TTFT 10 ms of a 100 ms request.
    assert summary.loc[1, "prefill_share"] == pytest.approx(0.1)
    assert row["prefill_share"] == pytest.approx(0.1)
    assert np.isnan(summary.loc[1, "overlap"]) and np.isnan(summary.loc[1, "overlap_unc"])


def test_t1_s_own_spread_widens_the_overlap_s(tmp_path):
    """Every release's overlap shares T1: its standard error adds in quadrature,
    times W / ((N - 1) T1²)."""
    singles = [90.0, 95.0, 100.0, 105.0, 110.0]
    overlaps = np.array([0.5, 0.6, 0.7, 0.8, 0.9])
    walls = 200 - 100 * overlaps
    files = [single_cell(tmp_path, singles), two_way_cell(tmp_path, list(walls))]
    row = cell_summary.summarize(files, CONTEXTS).set_index("conc").loc[2]
    t1_se = MEDIAN_SE * np.std(singles, ddof=1) / np.sqrt(5)
    releases = MEDIAN_SE * np.std(overlaps, ddof=1) / np.sqrt(5)
    assert row["overlap_se"] == pytest.approx(np.hypot(releases, 130.0 / 100.0 ** 2 * t1_se))
    assert row["overlap_se"] > releases


def test_one_release_has_no_spread(tmp_path):
    files = [single_cell(tmp_path, [100.0] * 3), two_way_cell(tmp_path, [150.0])]
    row = cell_summary.summarize(files, CONTEXTS).set_index("conc").loc[2]
    assert row["overlap"] == pytest.approx(0.5)
    assert np.isnan(row["overlap_unc"]) and np.isnan(row["throughput_tps_unc"])


def test_one_release_keeps_the_single_streams_part_as_a_lower_bound(tmp_path):
    """One release has no spread of its own; T1's spread still moves its overlap, so
    that part is its ±, marked a lower bound (†) in the table."""
    singles = [90.0, 100.0, 110.0]
    files = [single_cell(tmp_path, singles), two_way_cell(tmp_path, [150.0])]
    summary = cell_summary.summarize(files, CONTEXTS)
    row = summary.set_index("conc").loc[2]
    t1_se = MEDIAN_SE * np.std(singles, ddof=1) / np.sqrt(3)
    assert row["overlap_se"] == pytest.approx(150.0 / 100.0 ** 2 * t1_se)
    assert row["overlap_unc_lower_bound"] is True or row["overlap_unc_lower_bound"] == 1
    text = tables.overlap_table(summary, list(CONTEXTS))
    # T1's part alone, at its 3 requests' 2 degrees of freedom.
    assert f"0.50 ±{intervals.t_factor(2) * row['overlap_se']:.2f}†" in text.iloc[0].to_string()


def test_a_failed_release_makes_the_level_unusable_and_gives_no_overlap(tmp_path):
    """Two good releases, then one whose second request crashed after 3 of 10 tokens:
    the cell's status (every request row carries the worst of all its releases) is
    crash, its overlap the good releases' only, and the boundary stops below it."""
    rows = []
    for k, wall in enumerate([150.0, 130.0, 500.0]):
        for i in range(2):
            cut = k == 2 and i == 1
            rows.append(release_request(2 * k + i, shot=k, send_ms=1000.0 * k, wall_ms=wall,
                                status="crash" if cut else "ok", n=3 if cut else 10,
                                n_predict=10))
    statuses = [r["status"] for r in rows]
    for r in rows:
        r["cell_status"] = metrics.cell_status(statuses)  # as cells.measure writes it
    files = [single_cell(tmp_path, [100.0] * 3), write_cell(tmp_path, "a", "short", 2, rows)]
    summary = cell_summary.summarize(files, CONTEXTS)
    row = summary.set_index("conc").loc[2]
    assert row["status"] == "crash" and row["releases"] == 3
    assert row["overlap"] == pytest.approx(np.median([0.5, 0.7]))
    boundary = tables.concurrency_boundary(summary, ORDER).set_index("link")
    assert boundary.loc["a", "short"] == "1 (crashes at 2)"


# ---------------------------------------------------------------- tables and chart


def cell(link: str, ctx: str, conc: int, overlap: float | None = None,
         unc: float | None = None, share: float | None = 0.1, status: str = "ok") -> dict:
    return {"pair": "lab", "link": link, "model": "m", "ctx": ctx, "conc": conc,
            "status": status, "overlap": overlap, "overlap_unc": unc,
            "prefill_share": share, "flags": None}


def overlap_texts(*cells: dict) -> pd.DataFrame:
    summary = pd.DataFrame([cell("a", "short", 1), cell("a", "long", 1, share=0.6), *cells])
    return tables.overlap_table(summary, ORDER).set_index("link")


@pytest.mark.parametrize(("value", "unc", "share", "mark"), [
    (-0.5, 0.1, 0.1, "⚠"),     # worse than serial beyond its ±, decode dominates
    (-0.02, 0.05, 0.1, ""),    # inside [-0.05, 1.05]
    (-0.12, 0.20, 0.1, "‡"),   # outside, but within its ± of 0
    (-0.5, 0.1, 0.6, "‡"),     # prefill dominates: queued prefills can be worse
    (1.02, 0.05, 0.1, ""),     # inside [-0.05, 1.05]
    (1.08, 0.10, 0.1, "‡"),    # outside, but within its ± of 1
    (1.3, 0.1, 0.1, "⚠"),      # more than fully concurrent beyond its ±
    (0.81, 0.05, 0.1, ""),
])
def test_an_overlap_outside_0_to_1_is_flagged_or_marked_with_its_reason(value, unc, share,
                                                                        mark):
    """No overlap outside [-0.05, 1.05] is shown bare: ⚠ where it is impossible, ‡ with
    the reason it is no fault otherwise; inside it, neither."""
    table = overlap_texts(cell("a", "short", 2, value, unc, share), cell("a", "short", 4))
    text = table.loc["a", "short"].split(" / ")[0]
    assert text.startswith(f"{value:.2f} ±{unc:.2f}")
    assert text.endswith(tables.FLAG_MARK) == (mark == "⚠")
    assert text.endswith(tables.OUTSIDE_MARK) == (mark == "‡")
    assert (releases.overlap_flag(value, unc, share) is not None) == (mark == "⚠")
    reason = releases.overlap_outside(value, unc, share)
    assert (reason is not None) == (mark == "‡")
    summary = pd.DataFrame([cell("a", "short", 1), cell("a", "short", 2, value, unc, share)])
    assert (f"‡ lab/a/m/short/2: {value:.2f} ±{unc:.2f}" in tables.overlap_note(summary)) \
        == (mark == "‡")


def test_an_overlap_without_a_plus_minus_keeps_one_decimal_and_the_old_limit():
    table = overlap_texts(cell("a", "short", 2, 1.2, None), cell("a", "short", 4, -0.5, None))
    assert table.loc["a", "short"] == f"1.2 {tables.FLAG_MARK} / -0.5{tables.OUTSIDE_MARK}"


def test_the_note_names_the_impossible_and_the_unresolvable():
    summary = pd.DataFrame([
        cell("a", "short", 1), cell("b", "short", 1),
        cell("a", "short", 2, 0.81, 0.05), cell("a", "short", 4, 0.75, 0.06),  # ~
        cell("b", "short", 2, 0.40, 0.05), cell("b", "short", 4, -0.5, 0.1),   # apart, ⚠
    ])
    note = tables.overlap_note(summary)
    assert "a 2-way ~ 4-way at short" in note
    assert "b 2-way ~ 4-way" not in note
    # Links at one level: a and b differ at 2-way (0.81 vs 0.40) and 4-way.
    assert "links at one level" not in note
    assert f"{tables.FLAG_MARK} lab/b/m/short/4: -0.50 ±0.10 is below 0" in note
    close = pd.concat([summary, pd.DataFrame([
        cell("c", "short", 2, 0.78, 0.05), cell("c", "short", 1),
        cell("a", "long", 1, share=0.6), cell("a", "long", 2, 0.1, 0.1),
        cell("a", "long", 4, 0.0, 0.1)])])
    note = tables.overlap_note(close)
    assert "short 2-way: a ~ c" in note and "short 2-way: a ~ b" not in note
    assert "a 2-way ~ 4-way at short, long" in note


def test_the_overlap_chart_labels_carry_the_plus_minus():
    summary = pd.DataFrame([
        cell("a", "short", 1), cell("a", "short", 2, 0.81, 0.05),
        cell("a", "short", 4, 1.3, 0.1), cell("a", "long", 2, status="crash")])
    summary["ctx_tokens"] = summary["ctx"].map(CONTEXTS)
    spec = charts.overlap(summary).to_dict()
    labels = {row["label"] for row in spec["datasets"][next(iter(spec["datasets"]))]}
    assert {"0.81 ±0.05", f"1.30 ±0.10 {tables.FLAG_MARK}", "crash"} <= labels


def test_the_token_timeline_draws_the_median_release_only():
    """Releases of 100, 150 and 130 ms: the timeline draws the 130 ms one's N streams."""
    rows = []
    for shot, wall in enumerate([100.0, 150.0, 130.0]):
        for stream in range(2):
            send = int(1e9 * shot)
            for i in range(3):
                rows.append({"request_id": 2 * shot + stream, "token_index": i,
                             "t_send_ns": send, "t_ns": send + int(wall * 1e6 * (i + 1) / 3),
                             "repeat": 0, "shot": shot, "reference": False})
    tokens = charts.one_release(pd.DataFrame(rows))
    assert set(tokens["request_id"]) == {4, 5}
    assert (tokens["releases"] == 3).all()
    summary_row = pd.Series({"pair": "lab", "link": "a", "model": "m", "ctx": "short",
                             "conc": 2, "overlap": 0.7})
    spec = charts.token_timeline(tokens, summary_row).to_dict()
    assert "median of 3 releases" in str(spec["title"])
