"""Charts from in-memory results: every chart builds and renders, also with failed cells,
a single link or nothing at all; the figures they draw are the right ones."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import vl_convert as vlc

from splitbench.compare import mechanisms
from splitbench.report import charts
from tests.support.comparison_rows import compared

ROOT = Path(__file__).resolve().parents[2]
CONTEXTS = {"short": 128, "5k": 5000}
LATENCY_US = {"baseline": 100.0, "slow": 900.0}
ROUND_TRIPS = 2.0  # decode pays this many link round trips per token in the fixture


def summary_frame(links: tuple[str, ...] = ("baseline", "slow"),
                  failed: tuple[tuple[str, str, int], ...] = ()) -> pd.DataFrame:
    """A summary with decode = compute(ctx) + ROUND_TRIPS x latency; `failed` cells
    (link, ctx, conc) crash and carry no figures."""
    rows = []
    for link in links:
        for ctx, tokens in CONTEXTS.items():
            for conc in (1, 2, 4):
                ms = 1.0 + tokens / 5000 + ROUND_TRIPS * LATENCY_US[link] / 1000
                bad = (link, ctx, conc) in failed
                rows.append({
                    "pair": "lab", "link": link, "model": "m", "ctx": ctx, "conc": conc,
                    "ctx_tokens": tokens, "status": "crash" if bad else "ok",
                    "decode_ms_per_token": np.nan if bad else ms * conc,
                    "decode_tps": np.nan if bad else 1000 / (ms * conc),
                    "prefill_tps": np.nan if bad else 2000.0 - tokens / 10,
                    "ttft_ms": np.nan if bad else tokens / 2.0,
                    "overlap": np.nan if bad or conc == 1 else 1.0 - tokens / 5000,
                    "temp_after_c": None,
                })
    return pd.DataFrame(rows)


def links_frame(links: tuple[str, ...] = ("baseline", "slow")) -> pd.DataFrame:
    return pd.DataFrame([{
        "pair": "lab", "link": link, "a_to_b_gbps": 5.0, "b_to_a_gbps": 4.0,
        "bidir_gbps": 8.0, "ping_ms": LATENCY_US[link] / 2000, "rr16k_p50_us": LATENCY_US[link],
        "rr_fixed_us": LATENCY_US[link] * 0.8,
    } for link in links])


def tokens_frame(streams: int = 4, tokens: int = 16) -> pd.DataFrame:
    return pd.DataFrame([{
        "request_id": r, "token_index": i, "t_send_ns": 10**18 + r * 10**5,
        "t_ns": 10**18 + (20 + r * 5 + i) * 10**6,
    } for r in range(streams) for i in range(tokens)])


def rendered(chart) -> str:
    """The chart through vl-convert to SVG, the way PNGs are made: it must compile."""
    return vlc.vegalite_to_svg(chart.to_dict())


def test_every_chart_builds_and_renders():
    summary = summary_frame(failed=(("slow", "5k", 1),))
    cell = charts.timeline_cell(summary, "baseline")
    built = charts.build(summary, links_frame(), "baseline", tokens_frame(), cell,
                         comparison=compared(summary, "baseline"))
    assert list(built) == list(charts.CHARTS)
    for name, chart in built.items():
        svg = rendered(chart)
        assert "<svg" in svg, name
        assert charts.CHARTS[name][0] in svg, f"{name}: title missing"


def test_failed_cells_are_left_out_and_named():
    summary = summary_frame(failed=(("slow", "5k", 1),))
    spec = charts.decode_ms_per_token(summary).to_dict()
    drawn = next(iter(spec["datasets"].values()))
    assert ("slow", "5k") not in {(r["link"], r["ctx"]) for r in drawn}
    assert "slow/m/5kx1: crash" in json.dumps(spec["title"])


def test_single_link_says_why_instead_of_failing():
    summary = summary_frame(links=("baseline",))
    built = charts.build(summary, links_frame(links=("baseline",)), "baseline",
                         tokens_frame(), charts.timeline_cell(summary, "baseline"),
                         comparison=compared(summary, "baseline"))
    delta = rendered(built["decode_delta"])
    assert "no link to compare" in delta
    assert "fit needs two links" in rendered(built["decode_vs_latency"])
    for chart in built.values():
        rendered(chart)


def test_empty_run_draws_notes():
    empty = summary_frame().iloc[0:0]
    built = charts.build(empty, links_frame().iloc[0:0], "baseline",
                         comparison=compared(empty, "baseline"))
    for name, chart in built.items():
        assert chart.to_dict()["mark"]["type"] == "text", name
        rendered(chart)


def test_links_that_all_failed_verification_draw_a_note():
    failed = links_frame().assign(**{c: None for c in ("a_to_b_gbps", "b_to_a_gbps",
                                                        "bidir_gbps", "ping_ms",
                                                        "rr16k_p50_us", "rr_fixed_us")})
    assert "no link was measured" in rendered(charts.links_chart(failed))
    # Latency measured, bandwidth not: the latency half alone.
    half = failed.assign(rr_fixed_us=100.0)
    assert len(charts.links_chart(half).to_dict()["hconcat"]) == 1
    vlc.vegalite_to_png(charts.links_chart(half).to_dict())


def test_the_token_gaps_chart_draws_each_single_streams_median_to_p99():
    summary = summary_frame()
    dist = pd.DataFrame([{"pair": "lab", "link": link, "model": "m", "ctx": ctx, "conc": conc,
                          "metric": "inter_token_latency_ms", "count": 200, "p50": 1.0,
                          "p90": 1.5, "p99": 4.0 if link == "slow" else 2.0, "max": 9.0}
                         for link in ("baseline", "slow") for ctx in ("short", "5k")
                         for conc in (1, 2)])
    chart = charts.token_gaps(summary, percentiles=dist)
    drawn = next(iter(chart.to_dict()["datasets"].values()))
    assert len(drawn) == 4 and {r["conc"] for r in drawn} == {1}  # single streams only
    assert "Gaps between tokens" in rendered(chart)
    assert "no single-stream cell" in rendered(charts.token_gaps(summary, percentiles=None))


def test_the_what_if_chart_draws_the_service_levels_target_where_one_is_set():
    from splitbench.compare import whatif
    from splitbench.report import sensitivity
    summary = summary_frame()
    links = links_frame().assign(rr64_p50_us=lambda f: f["rr16k_p50_us"])
    trips = pd.DataFrame([{"pair": "lab", "model": "m", "workers": 1,
                           "round_trips": ROUND_TRIPS, "round_trips_se": 0.05,
                           "round_trips_from": "the delay sweep"}])
    rows = whatif.model(summary, links, trips, {"m": 1}, "baseline")
    points = whatif.measured_points(rows, pd.DataFrame(columns=[
        "pair", "model", "ctx", "status", "status_base", "link"]))
    levels = pd.DataFrame([{"tokens_per_s_target": 200.0}, {"tokens_per_s_target": 200.0}])
    chart = sensitivity.build(summary, rows, points, ["short", "5k"], levels=levels)
    drawn = [r for data in chart.to_dict()["datasets"].values() for r in data
             if r.get("part") == "target"]
    assert drawn and {r["target_tps"] for r in drawn} == {200.0}
    svg = rendered(chart)
    assert "the service level's 200 tok/s per stream" in svg
    # No level set: no rule, no words about one.
    bare = sensitivity.build(summary, rows, points, ["short", "5k"])
    assert "service level" not in rendered(bare)


def test_delta_against_the_baseline():
    delta = charts.delta_vs_baseline(summary_frame(), compared(summary_frame(), "baseline"))
    assert set(delta["link"]) == {"slow"}
    expected = ROUND_TRIPS * (LATENCY_US["slow"] - LATENCY_US["baseline"]) / 1000
    assert delta["delta_ms"].to_numpy() == pytest.approx([expected] * len(CONTEXTS))


def test_the_latency_chart_draws_the_mechanisms_tables_own_slope():
    """One estimator: the dashed lines have the slope the mechanisms table prints, through
    each context's baseline point, and the label quotes it."""
    summary, links = summary_frame(), links_frame()
    table = mechanisms.table(summary, compared(summary, baseline="baseline"), links, list(CONTEXTS))
    decode = table[table["mechanism"] == "decode"].iloc[0]
    # The table fits against rr_fixed_us, which the fixture sets to 0.8 x the latency.
    assert decode["slope"] == pytest.approx(ROUND_TRIPS / 0.8, rel=1e-3)
    chart = charts.build(summary, links, "baseline", mechanisms=table)["decode_vs_latency"]
    data = pd.DataFrame(next(iter(chart.to_dict()["datasets"].values())))
    for ctx, line in data[data["part"] == "fit"].groupby("ctx"):
        x, y = line["latency_ms"].to_numpy(), line["fit_ms"].to_numpy()
        assert (y[1] - y[0]) / (x[1] - x[0]) == pytest.approx(decode["slope"])
        base = data[(data["part"] == "point") & (data["ctx"] == ctx)
                    & (data["link"] == "baseline")].iloc[0]
        at_base = y[0] + decode["slope"] * (base["latency_ms"] - x[0])
        assert at_base == pytest.approx(base["decode_ms_per_token"])
    label = data.loc[data["part"] == "label", "label"].iloc[0]
    assert label.startswith(f"slope {decode['slope']:.2f} ±{decode['±']:.2f} round trips")


def test_without_a_table_slope_the_chart_draws_no_line_and_says_why():
    summary, links = summary_frame(), links_frame()
    chart = charts.build(summary, links, "baseline")["decode_vs_latency"]
    data = pd.DataFrame(next(iter(chart.to_dict()["datasets"].values())))
    assert (data["part"] != "fit").all()
    assert "no slope: see the mechanisms table" in rendered(chart)


def test_timeline_cell_prefers_concurrency_on_the_baseline():
    summary = summary_frame(failed=(("baseline", "short", 4),))
    cell = charts.timeline_cell(summary, "baseline")
    assert (cell["link"], cell["ctx"], cell["conc"]) == ("baseline", "short", 2)
    named = charts.timeline_cell(summary, "baseline", "lab/slow/m/5k/4")
    assert (named["link"], named["ctx"], named["conc"]) == ("slow", "5k", 4)
    with pytest.raises(ValueError, match="not in the summary"):
        charts.timeline_cell(summary, "baseline", "lab/nope/m/5k/4")


def test_timeline_thins_long_cells_but_keeps_every_stream_end():
    tokens = tokens_frame(streams=4, tokens=3000)
    shown, step = charts._thin(tokens)
    assert step == 3
    assert len(shown) <= charts.TIMELINE_MAX_TOKENS + 4
    last = shown.groupby("request_id")["token_index"].max()
    assert (last == 2999).all()


def test_saved_files_are_offline_html_png_and_strict_json(tmp_path):
    summary = summary_frame(failed=(("slow", "5k", 1),))
    files = charts.save(charts.overlap(summary), tmp_path, "overlap")
    html, png, spec = files
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = html.read_text()
    assert "vegaEmbed" in text and not re.search(r"<script[^>]+src=", text)

    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} in chart JSON")

    json.loads(spec.read_text(), parse_constant=no_constants)


def test_every_chart_has_a_caption_for_the_workflow_report():
    # The charts rule declares one PNG per charts.CHARTS entry, each with this caption.
    for name in charts.CHARTS:
        assert (ROOT / "report" / "charts" / f"{name}.rst").is_file(), name


def test_the_vega_script_is_built_once_per_machine_and_cannot_end_its_element(
        tmp_path, monkeypatch):
    """vl-convert builds the libraries' script on request (seconds of CPU in every job
    that asks): the first job keeps it in the user's cache, the next reads it."""
    from splitbench.report import vega

    monkeypatch.setenv("HOME", str(tmp_path))
    built = []

    def javascript_bundle(vl_version: str) -> str:
        built.append(vl_version)
        return "var x = '</script>'; /* the libraries */"

    monkeypatch.setattr(vega.vl_convert, "javascript_bundle", javascript_bundle)
    first, second = vega.bundle(), vega.bundle()
    assert built == [vega.VL_VERSION] and first == second
    assert "</script" not in first.lower()
    assert list((tmp_path / ".cache/splitbench/vega").glob("*.js"))
    page = vega.offline_html({"mark": "point", "data": {"values": [{"a": "</b>"}]}}, "t")
    assert page.count("</script>") == 2 and "vegaEmbed" in page
