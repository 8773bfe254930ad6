"""results/page.html from small generated results: what it holds, and the page in headless
Chromium (renders, no console errors, no network, charts visible; reads on a laptop: findings
first, nothing wider than 1,280 px, long cells wrap). The checks fail on broken pages."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from splitbench import cli, configuration, version
from splitbench.compare import comparison, whatif
from splitbench.contracts import results
from splitbench.health import checks, drift
from splitbench.infra import parquet_io, tables_io
from splitbench.matrix.plan import pairs_slice
from splitbench.report import charts, html_parts, page, provenance, side_by_side
from splitbench.summary import cell_summary, percentiles
from tests.support.browser import laptop_problems, needs_chromium, open_page, problems

CONTEXTS = {"short": 128, "5k": 5000}
LINKS = {"baseline": 100.0, "slow": 900.0}  # 16 KB request-response p50, µs
CONCURRENCY = (1, 2, 4)
FAILED = ("slow", "5k", 4)
LLAMA_VERSION = "version: 9999 (abc1234)"
# Two pairs: the embedded lab, and an SSH pair (B remote) measured a day later, slower.
PAIRS = {"lab": {"day": 0, "slower": 1.0}, "far": {"day": 1, "slower": 1.5}}
CONFIG_PAIRS = {
    "lab": {"mode": "embedded", "hosts": {"a": {}, "b": {}},
            "links": {"baseline": {}, "slow": {"delay_ms": 0.4}}},
    "far": {"mode": "ssh", "hosts": {"a": {"node": "gpu-a01"},
                                     "b": {"ssh": "bench@192.0.2.7", "identity": "/k"}},
            "links": {"baseline": {"interface_a": "eth1", "interface_b": "eth1"},
                      "slow": {"interface_a": "eth2", "interface_b": "eth2"}}},
}


def typed_pairs(pairs: dict) -> dict[str, configuration.Pair]:
    return {name: configuration.Pair.model_validate(spec) for name, spec in pairs.items()}


# --- generated results ----------------------------------------------------------------
def _tokens(link: str, ctx: str, conc: int, pair: str = "lab") -> pd.DataFrame:
    ms = (1.0 + CONTEXTS[ctx] / 5000 + 2 * LINKS[link] / 1000) * PAIRS[pair]["slower"]
    t0 = (1_790_000_000 + 86_400 * PAIRS[pair]["day"]) * 10**9
    return pd.DataFrame([{
        "request_id": r, "token_index": i, "t_send_ns": t0 + r * 10**5,
        "t_ns": t0 + int((CONTEXTS[ctx] / 100 * (r + 1) + i * ms * conc) * 1e6),
    } for r in range(conc) for i in range(16)])


def _requests(tokens: pd.DataFrame, status: str, clock: str) -> pd.DataFrame:
    per = tokens.groupby("request_id").agg(t_send_ns=("t_send_ns", "first"),
                                           t_end_ns=("t_ns", "max"),
                                           generated_tokens=("t_ns", "size")).reset_index()
    return per.assign(status=status, cell_status=status, launch_id="launch-" + "x" * 4,
                      arrival_clock=clock)


SHAPE = "2x64 h4/2 v1024"
# A verdict as long as the mechanisms table writes them: it must wrap, not widen the table.
VERDICT = ("decode pays ~1.05 ±0.04 round trips of link latency per token, the same at "
           "every context (a fixed per-token cost); slow: +2.40 ±0.10 ms/token measured, "
           "predicted bandwidth +0.01 ±0.00 (B→A 8.2 KB at 1.12 Gbit/s) + latency +2.30 "
           "±0.05 (the sweep's round trips × the latency difference): latency dominates")
FINDINGS = f"""## Findings

### m

- {FAILED[0]} at {FAILED[1]} x{FAILED[2]} crashed on both pairs. → [pairs](#table-pairs)
- slow costs decode +2.40 ±0.10 ms/token at the short context: one round trip of its
  extra latency. → [links](#table-links), [mechanisms](#table-mechanisms),
  [decode vs latency](#chart-decode_vs_latency)
"""


def write_results(root: Path) -> dict[str, Any]:
    """Every input the charts and report stages read, under root/results."""
    res = root / "results"
    rows, request_files = [], []
    for pair, (link, rr_us) in ((p, item) for p in PAIRS for item in LINKS.items()):
        launch = {"launch_id": f"{pair}-{link}-launch", "pair": pair, "link": link,
                  "load_s": 0.1, "started_at": 1_790_000_000.0, "settings": {"slots": 4},
                  "commands": {"llama_server": ["llama-server", "--rpc", "10.0.0.2:50052"],
                               "rpc_server": ["ggml-rpc-server", "-H", "10.0.0.2"]}}
        for ctx, n in CONTEXTS.items():
            for conc in CONCURRENCY:
                ok = (link, ctx, conc) != FAILED
                tokens = _tokens(link, ctx, conc, pair)
                layout = results.cell(pair, link, "m", ctx, conc)
                parquet_io.write(tokens, root / layout, {"launch": launch})
                requests = root / results.cell_requests(pair, link, "m", ctx, conc)
                clock = "segment" if link == "baseline" else "read"
                parquet_io.write(_requests(tokens, "ok" if ok else "crash", clock), requests,
                                 {"launch": launch})
                request_files.append(str(requests))
                ms = (1.0 + n / 5000 + 2 * rr_us / 1000) * PAIRS[pair]["slower"]
                rows.append({
                    "pair": pair, "link": link, "model": "m", "ctx": ctx, "conc": conc,
                    "ctx_tokens": n, "status": "ok" if ok else "crash",
                    "server_launch_id": launch["launch_id"],
                    "decode_ms_per_token": ms * conc if ok else np.nan,
                    "decode_ms_se": 0.01 * ms, "throughput_tps": 1000 / ms if ok else np.nan,
                    "prefill_tps": 2000.0 - n / 10 if ok else np.nan,
                    "overlap": (1 - n / 5000 if conc > 1 else np.nan) if ok else np.nan,
                    "split": "rpc", "model_shape": SHAPE})
                if pair == "lab":  # the same shape by vLLM's tensor parallel: the backends
                    rows.append({**rows[-1], "model": "mv", "split": "tp2",  # table's
                                 "status": "ok", "server_launch_id": None,
                                 "decode_ms_per_token": 8 + ms, "throughput_tps": 100.0,
                                 "prefill_tps": 900.0 - n / 20,
                                 "overlap": 0.9 if conc > 1 else np.nan})
    summary = res / "summary" / "cells.parquet"
    parquet_io.write(pd.DataFrame(rows), summary, {"cells": len(rows)})
    link_files = []
    for pair, (i, (link, rr_us)) in ((p, item) for p in PAIRS
                                     for item in enumerate(LINKS.items())):
        path = res / "links" / pair / f"{link}.parquet"
        spec = {"pair": pair, "link": link, "mode": CONFIG_PAIRS[pair]["mode"]}
        if CONFIG_PAIRS[pair]["mode"] == "ssh":
            spec["hosts"] = CONFIG_PAIRS[pair]["hosts"]
        parquet_io.write(pd.DataFrame([{
            "pair": pair, "link": link, "a_to_b_gbps": 4.0 + i, "b_to_a_gbps": 4.5,
            "bidir_gbps": 8.0, "ping_ms": 0.05, "rr16k_p50_us": rr_us, "rr_fixed_us": rr_us / 2,
            "rr64_p50_us": rr_us / 3,
            "emulation_mode": "netns-veth" if pair == "lab" else "real",
            "emulation_rate": "tbf" if i and pair == "lab" else "none",
            "emulation_delay": "netem" if i and pair == "lab" else "none",
            "emulated_delay_ms": 0.4 * i,
            "measured_at": f"2026-11-30T07:3{i}:00+00:00", "fingerprint": f"fp{i}",
        }]), path, {"commands": [["iperf3", "-c", "x" * 1000]], "config": spec})
        link_files.append(str(path))
    toolchains = []
    for pair in PAIRS:
        toolchain = res / "toolchain" / f"{pair}.json"
        toolchain.parent.mkdir(parents=True, exist_ok=True)
        host = {"llama_server_version": LLAMA_VERSION, "build_id": "b1", "package": "pkg==1"}
        toolchain.write_text(json.dumps({"pair": pair, "source": "pip", "a": host, "b": host}))
        toolchains.append(str(toolchain))
    tables = res / "tables"
    tables.mkdir()
    (tables / "single_stream_decode.md").write_text(
        "## Single-stream decode (tok/s) by context\n\n| link | short |\n|---|---|\n"
        "| baseline | 10.0 |\n| slow | <script>alert(1)</script> |\n")
    (tables / "links.md").write_text("## Links\n\n| link | A→B |\n|---|---|\n| slow | 5.0 |\n")
    (tables / "links.csv").write_text("link,A→B\nslow,5.0\n")
    (tables / "zz_only_csv.csv").write_text("a,b\n1,\n")
    (tables / "mechanisms.md").write_text(
        "## Mechanisms\n\n| model | mechanism | slope | ± | verdict |\n|---|---|---|---|---|\n"
        f"| m | decode | 1.05 | 0.04 | {VERDICT} |\n| m | prefill | 0.1 | 0.2 | {VERDICT} |\n")
    (res / "findings.md").write_text(FINDINGS)
    # The comparison, the what-if model and its points, as link-comparison writes them.
    trips = pd.DataFrame([{"pair": p, "model": "m", "workers": 1, "round_trips": 1.0,
                           "round_trips_se": 0.02} for p in PAIRS])
    summary_frame, links_frame = pd.DataFrame(rows), cell_summary.read_links(link_files)
    model_rows = whatif.model(summary_frame, links_frame, trips, {"m": 1}, "baseline")
    comp = comparison.run_comparison(summary_frame, links_frame, "baseline", None, trips, {"m": 1})
    comp.to_parquet(results.under(res, results.COMPARISON))
    whatif.write(model_rows, whatif.measured_points(model_rows, comp),
                 results.under(res, results.WHATIF), results.under(res, results.WHATIF_POINTS))
    # Every cell's distributions, as the aggregate stage writes them.
    percentiles.table(request_files).to_parquet(results.under(res, results.PERCENTILES))
    # The pairs table as the aggregate stage writes it.
    frame = side_by_side.pairs_table(pd.DataFrame(rows), cell_summary.read_links(link_files),
                                      list(CONTEXTS), "baseline")
    tables_io.write_table(frame, tables / "pairs", "Pairs side by side")
    return {"summary": str(summary), "links": link_files, "toolchain": toolchains,
            "requests": request_files, "cells": str(res / "cells"),
            "tables": str(tables), "charts": str(res / "charts"),
            "findings": str(res / "findings.md"), "page": str(res / "page.html"),
            "whatif": results.under(res, results.WHATIF),
            "comparison": results.under(res, results.COMPARISON),
            "whatif_points": results.under(res, results.WHATIF_POINTS),
            "percentiles": results.under(res, results.PERCENTILES)}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Any]:
    """The charts and report stages run through the command line on generated results."""
    paths = write_results(tmp_path_factory.mktemp("run"))
    assert cli.main(["charts", "--summary", paths["summary"], "--links", *paths["links"],
                     "--baseline", "baseline", "--cells", paths["cells"],
                     "--whatif", paths["whatif"], "--whatif-points", paths["whatif_points"],
                     "--percentiles", paths["percentiles"], "--out", paths["charts"],
                     "--comparison", paths["comparison"]]) == 0
    assert cli.main(["report", "--summary", paths["summary"], "--links", *paths["links"],
                     "--toolchain", *paths["toolchain"], "--requests", *paths["requests"],
                     "--cells", paths["cells"], "--tables", paths["tables"],
                     "--charts", paths["charts"],
                     "--pairs", json.dumps(pairs_slice(typed_pairs(CONFIG_PAIRS))),
                     "--findings", paths["findings"], "--out", paths["page"]]) == 0
    return paths


# --- the page's content ---------------------------------------------------------------

def test_page_holds_every_table_in_order_and_every_chart(built):
    text = Path(built["page"]).read_text()
    order = [text.index(f'id="table-{s}"') for s in ("links", "single_stream_decode",
                                                    "zz_only_csv")]
    assert order == sorted(order)
    for name in charts.CHARTS:
        assert f'id="vis-{name}"' in text
        assert (Path(built["charts"]) / f"{name}.png").is_file()
    assert text.count('class="chart-spec"') == len(charts.CHARTS)


def test_findings_open_the_page_and_their_links_land(built):
    """Findings first (right after the title and its links), then the charts, the
    tables, the provenance with the checks; every in-page link has its target."""
    text = Path(built["page"]).read_text()
    body = text.split("<body>", 1)[1]
    assert re.findall(r'<section id="([^"]+)"', body)[0] == "findings"
    order = [body.index(f'<section id="{s}"') for s in ("findings", "charts", "tables",
                                                        "provenance")]
    assert order == sorted(order)
    assert body.index('id="checks"') > body.index('<section id="provenance"')
    findings = body[body.index('<section id="findings"'):body.index('<section id="charts"')]
    assert "<h3>m</h3>" in findings and findings.count("<li>") == 2
    assert findings.count("<h2>") == 1  # the file's own heading is the page's
    ids = set(re.findall(r' id="([^"]+)"', text))
    targets = re.findall(r'href="#([^"]+)"', body)
    assert {"table-mechanisms", "chart-decode_vs_latency", "checks"} <= set(targets)
    assert [t for t in targets if t not in ids] == []
    # Each table says what to read from it.
    mechanisms = body[body.index('id="table-mechanisms"'):]
    assert '<p class="read"><strong>Read:</strong> the verdict column' in mechanisms[
        :mechanisms.index("</section>")]


def test_without_findings_the_page_says_none_were_written(tmp_path):
    html = page.findings_section(tmp_path / "findings.md")
    assert html.startswith('<section id="findings"><h2>Findings</h2>')
    assert "No findings were written" in html and "findings.md" in html
    (tmp_path / "findings.md").write_text("## Findings\n\n")
    assert "No findings were written" in page.findings_section(tmp_path / "findings.md")
    assert "No findings were written" in page.findings_section(None)


def test_long_cells_wrap_and_short_ones_do_not():
    table = html_parts.markdown(f"| a | b |\n|---|---|\n| 1.84 ±0.04 | {VERDICT} |\n")
    assert '<td class="long">' in table and "<td>1.84 ±0.04</td>" in table
    assert table.startswith('<div class="table-wrap"><table>')


def test_page_needs_no_network_and_escapes_table_text(built):
    head, body = Path(built["page"]).read_text().split("</head>", 1)
    # The head's one script is the inlined Vega bundle (whose own code mentions <img src=).
    assert re.search(r"<script[^>]*>", head).group(0) == "<script>"
    assert "<link" not in head.split("<script>")[0]
    assert not re.search(r"<(script|img|iframe)[^>]+src=|<link[^>]+href=", body)
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert 'href="data:text/csv;base64,' in body


def test_page_carries_provenance(built):
    text = Path(built["page"]).read_text()
    for expected in (LLAMA_VERSION, "netns-veth", "netem", "ggml-rpc-server -H 10.0.0.2",
                     "2026-11-30 07:30:00 UTC", "splitbench_version",
                     "(1000 characters)",  # long metadata values are cut, and say so
                     # 2 pairs x 2 contexts x (1 + 2 + 4) requests per link
                     "per-segment arrival (packet socket): 28 requests",
                     "when the read returned: 28 requests",
                     # the code that wrote the report, and the summary's
                     version.described()):
        assert expected in text, expected
    assert text.count(f"(commit {version.commit()})") >= 2


def _pair_row(text: str, pair: str) -> str:
    """The run block's row of one pair (its HTML)."""
    block = text[text.index('<h3 id="pairs">'):]
    block = block[:block.index("</table>")]
    return next(row for row in block.split("<tr>") if f"<td>{pair}</td>" in row)


def test_run_block_lists_each_pair_with_its_hosts_links_and_dates(built):
    text = Path(built["page"]).read_text()
    lab, far = _pair_row(text, "lab"), _pair_row(text, "far")
    for expected in ("embedded (namespace sb-lab-a)", "embedded (namespace sb-lab-b)",
                     "baseline, slow", "2026-09-21 14:13:20 UTC"):
        assert expected in lab, expected
    for expected in ("node gpu-a01 (runs splitbench)", "ssh bench@192.0.2.7",
                     "2026-09-22 14:13:20 UTC"):
        assert expected in far, expected
    # Each pair's own dates: the lab's cells end the first day, far's start the next.
    assert "2026-09-22" not in lab and "2026-09-21" not in far
    assert "/k" not in far  # only where the hosts are, not their keys


def test_the_pairs_table_is_on_the_page_after_overlap(built):
    text = Path(built["page"]).read_text()
    assert text.index('id="table-pairs"') > text.index('id="table-single_stream_decode"')
    table = text[text.index('id="table-pairs"'):]
    table = table[:table.index("</section>")]
    assert "<td>far</td>" in table and "<td>lab</td>" in table
    assert "✗ crash" in table  # the failed cell stays visible on both pairs


def test_pairs_from_the_link_results_alone(built):
    """Without the config slice, the run block says what the link results record."""
    summary = pd.read_parquet(built["summary"])
    links = cell_summary.read_links(built["links"])
    rows = page.pair_rows(summary, links, built["links"],
                          provenance.request_facts(built["requests"])).set_index("pair")
    assert rows.loc["lab", "host A"] == "embedded (namespace sb-lab-a)"
    # An SSH pair's link results record its hosts, the node among them.
    assert rows.loc["far", "host A"] == "node gpu-a01 (runs splitbench)"
    assert rows.loc["far", "host B"] == "ssh bench@192.0.2.7"
    assert rows.loc["far", "links"] == "baseline, slow"
    assert rows.loc["far", "cells"] == 2 * 2 * 3


def test_pairs_slice_keeps_where_the_hosts_are_and_nothing_else():
    sliced = pairs_slice(typed_pairs({**CONFIG_PAIRS, "rig": {
        "mode": "ssh", "hosts": {"a": {"feature": "pair_rig"}, "b": {"ssh": "rig-b"}},
        "links": {"eth": {}}}}))
    assert sliced["rig"]["hosts"]["a"] == {"feature": "pair_rig"}
    assert page._host_text("rig", "a", "ssh", sliced["rig"]["hosts"]["a"], set()) == (
        "a node with feature pair_rig (runs splitbench)")
    assert sliced["far"] == {"mode": "ssh", "hosts": {"a": {"node": "gpu-a01"},
                                                      "b": {"ssh": "bench@192.0.2.7"}},
                             "links": ["baseline", "slow"]}
    assert sliced["lab"]["hosts"] == {"a": {}, "b": {}}


# --- the page in a browser (tests/support/browser.py drives it) -------------------------------
@pytest.fixture(scope="module")
def seen(built) -> dict[str, Any]:
    """The built page as a 1,280 px window shows it."""
    return open_page(Path(built["page"]), width=1280)


@pytest.mark.slow
@needs_chromium
def test_page_renders_in_chromium(seen, tmp_path):
    shot = tmp_path / "report.png"
    shot.write_bytes(seen["screenshot"])
    if os.environ.get("SPLITBENCH_SCREENSHOT"):  # to look at it: a path to copy it to
        shutil.copy(shot, os.environ["SPLITBENCH_SCREENSHOT"])
    assert problems(seen, len(charts.CHARTS)) == []


@pytest.mark.slow
@needs_chromium
def test_page_reads_on_a_laptop(seen):
    """At 1,280 px: the findings are the first section, nothing scrolls the page
    sideways, and a table with long text cells wraps them to fit its box."""
    assert laptop_problems(seen) == []
    assert any(box["section"] == "table-mechanisms" and box["widestLong"]
               for box in seen["layout"]["boxes"])


def _break_spec(text: str) -> str:
    """The first chart's spec loses its mark: Vega-Lite rejects it."""
    start = text.index('class="chart-spec"')
    return text[:start] + text[start:].replace('"mark":', '"mark_broken":', 1)


def _drop_vega(text: str) -> str:
    """The inlined Vega bundle is gone (as if it had been a CDN link, offline)."""
    return re.sub(r"<script>.*?</script></head>", "</head>", text, count=1, flags=re.S)


def _hide_charts(text: str) -> str:
    """Charts render into the DOM but paint nothing: only the screenshot can tell."""
    return text.replace("</head>", "<style>.chart svg { visibility: hidden; }</style></head>")


@pytest.mark.slow
@needs_chromium
@pytest.mark.parametrize("breakage, symptom", [
    (_break_spec, f"charts rendered: {len(charts.CHARTS) - 1}/{len(charts.CHARTS)}"),
    (_drop_vega, "vegaEmbed is not defined"),
    (_hide_charts, "blank in the screenshot"),
], ids=["bad spec", "no vega", "nothing painted"])
def test_browser_check_catches_a_broken_page(built, tmp_path, breakage, symptom):
    broken = tmp_path / "broken.html"
    broken.write_text(breakage(Path(built["page"]).read_text()))
    found = problems(open_page(broken, wait_s=5), len(charts.CHARTS))
    assert any(symptom in problem for problem in found), found


@pytest.mark.slow
@needs_chromium
def test_a_chart_wider_than_the_window_scrolls_in_its_own_box(built, tmp_path):
    wide = tmp_path / "wide.html"
    wide.write_text(_wide_chart(Path(built["page"]).read_text()))
    assert laptop_problems(open_page(wide, wait_s=30)) == []


def _no_wrapping(text: str) -> str:
    """Every cell on one line, as the page had it: long verdicts widen their table."""
    return text.replace("</head>", "<style>td { white-space: nowrap !important; }</style>"
                                   "</head>")


def _no_boxes(text: str) -> str:
    """As _no_wrapping, with nothing scrolling inside its own box: the page grows."""
    return _no_wrapping(text).replace("</head>", "<style>.table-wrap { overflow: visible "
                                                 "!important; }</style></head>")


def _wide_chart(text: str) -> str:
    """A chart wider than the window (vega-embed makes its box an inline-block that
    grows with the chart, as the default run's overlap chart did at 1,373 px)."""
    return text.replace("</head>", "<style>.chart svg { min-width: 1600px; }</style></head>")


def _chart_unboxed(text: str) -> str:
    """The wide chart with its box free to grow, as the page had it."""
    return _wide_chart(text).replace("</head>", "<style>.chart { max-width: none "
                                                "!important; }</style></head>")


def _findings_last(text: str) -> str:
    """The findings moved after the tables, where the page had its run block."""
    start, end = text.index('<section id="findings">'), text.index('<section id="charts">')
    moved = text[:start] + text[end:]
    return moved.replace('<section id="provenance">',
                         text[start:end] + '<section id="provenance">', 1)


@pytest.mark.slow
@needs_chromium
@pytest.mark.parametrize("breakage, symptom", [
    (_no_wrapping, "table-mechanisms: long cells do not wrap"),
    (_no_boxes, "the page scrolls sideways"),
    (_chart_unboxed, "the page scrolls sideways"),
    (_findings_last, "first section: charts, not the findings"),
], ids=["cells on one line", "tables unboxed", "chart unboxed", "findings last"])
def test_laptop_check_catches_a_page_that_does_not_fit(built, tmp_path, breakage, symptom):
    broken = tmp_path / "broken.html"
    broken.write_text(breakage(Path(built["page"]).read_text()))
    found = laptop_problems(open_page(broken, wait_s=5))
    assert any(symptom in problem for problem in found), found


def test_report_module_lists_tables_by_reading_order(tmp_path):
    for stem in ("zz", "overlap", "links", "pairs", "link_comparison",
                 "single_stream_prefill", "mechanisms"):
        (tmp_path / f"{stem}.csv").write_text("a\n1\n")
    assert [p.name for p in page.table_stems(tmp_path)] == [
        "links", "link_comparison", "single_stream_prefill", "overlap", "pairs",
        "mechanisms", "zz"]


def test_checks_that_did_not_run_are_failures_in_the_run_block(tmp_path):
    summary = pd.DataFrame({"pair": ["lab"] * 3, "link": ["a", "b", "c"], "model": ["m"] * 3,
                            "interference": [None, "host A: steal 40% (limit 10%)", None],
                            "interference_checked": [True, True, False],
                            "timing": [None, None, None]})
    missing = checks.check_lines(summary, tmp_path / "none.parquet")
    assert ("failed", f"drift: not run (no {tmp_path / 'none.parquet'}): no cell is "
                      "checked for drift") in missing
    assert any(state == "failed" and "not measured for 1 of 3 cells" in text
               for state, text in missing)
    assert any(state == "flagged" and "1 of 3 cells measured while other work" in text
               for state, text in missing)
    found = drift.find_suspects(summary.assign(ctx="short", conc=1, status="ok"),
                                {("lab", "m"): {"start": None, "end": None}},
                                configuration.drift_settings({}))
    drift.write_report(found, tmp_path / "drift.parquet", tmp_path / "drift")
    lines = checks.check_lines(summary, tmp_path / "drift.parquet")
    assert ("failed", "drift check FAILED for lab/m: the start anchor was not measured; "
                      "the end anchor was not measured") in lines
    assert ("failed", "3 cell(s) not checked for drift") in lines
    html = provenance._checks_html(lines)
    assert html.count('class="check-failed"') == 3


def test_text_from_outside_makes_no_image_and_no_link_off_the_page():
    """An error text with Markdown's image or link syntax (a server's reply, a host's
    message) stays text on the page: nothing loads from, or points to, elsewhere."""
    text = ("| cell | error |\n|---|---|\n| a | ![x](http://192.0.2.1/x.png) "
            "[y](https://192.0.2.1/) [z](javascript:alert(1)) [w](//192.0.2.1/w) |\n\n"
            "[the links table](#table-links)")
    body = html_parts.markdown(text)
    assert "<img" not in body and "192.0.2.1\"" not in body and "javascript:" not in \
        body.split("href=")[-1].split(">")[0]
    assert body.count("<a ") == 1 and 'href="#table-links"' in body
    assert "![x](http://192.0.2.1/x.png)" in body  # shown as the text it was


def test_an_error_text_with_table_syntax_stays_in_its_cell():

    frame = pd.DataFrame({"cell": ["a"],
                          "error": ["500 | bad\n| x | y |\n![i](http://192.0.2.1/i)"],
                          "after": ["kept"]})
    body = html_parts.markdown(tables_io.to_markdown(frame))
    assert body.count("<tr>") == 2 and body.count("<td") == 3, body
    assert "<img" not in body and "<td>kept</td>" in body
