"""results/report.html: one page a person opens offline: what the run found first, then
the charts that carry it, the tables, and where the numbers came from (the run, the
toolchain, the links, the launches, the checks).

The page reads on a laptop: at a 1,280 px window nothing scrolls the page sideways; a
table too wide for its column scrolls inside its own box, and a long text cell (a
verdict, a flag) wraps instead of widening its table. Marks are glyphs a stock font has
(DejaVu Sans: ✗ ⚠ ✓), not colour emoji.

The page needs no network. The Vega, Vega-Lite and Vega-Embed libraries (vl-convert's
bundle, about 0.9 MB) are inlined once, and each chart travels as its Vega-Lite spec
with its data, rendered to SVG in the browser. That costs about what seven inlined
PNGs would, and keeps what PNGs lose: tooltips with the exact figures, sharp text at
any zoom, and text a reader can select and search.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow.parquet as pq

from splitbench import pairs
from splitbench.contracts import results
from splitbench.contracts.slices import HostSlice, LinkSlice
from splitbench.health.checks import check_lines
from splitbench.infra import files, parquet_io
from splitbench.pairs.base import placed
from splitbench.report import contents, vega
from splitbench.report.html_parts import esc, frame_html, markdown, script_json
from splitbench.report.provenance import clock_text, provenance_section, request_facts
from splitbench.summary import cell_summary

if TYPE_CHECKING:  # plan imports pydantic, which the report does not load
    from splitbench.contracts.slices import PairView

# Tables in the seed write-up's order; stems that match none come after, by name.
TABLE_ORDER = ["links", "link_comparison", "link_traffic", "single_stream_decode",
               "single_stream_prefill", "single_stream", "ttft", "percentiles",
               "service_levels",
               "concurrency", "boundary",
               "overlap", "pairs", "mechanism", "round_trips"]
STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1280px;
       padding: 0 24px 48px; color: #222; overflow-wrap: break-word; }
h1 { margin-bottom: 0; } h2 { border-bottom: 1px solid #ccc; margin-top: 2.2em; }
nav a { margin-right: 1em; } .muted { color: #666; }
#findings li { margin: .3em 0; } #findings h3 { margin-bottom: .2em; }
.read { margin: .2em 0 .4em; max-width: 60em; }
.table-wrap, .chart { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; white-space: nowrap;
         vertical-align: top; }
th { background: #f3f3f3; white-space: normal; min-width: 3em; }
tr:nth-child(even) td { background: #fafafa; }
td.long { white-space: normal; overflow-wrap: anywhere; min-width: 8em; text-align: left; }
td:first-child, th:first-child { text-align: left; }
.chart { margin: .5em 0 2em; min-height: 80px; }
.chart-error { color: #b00; font-weight: bold; }
details pre { background: #f6f6f6; padding: 8px; overflow-x: auto; font-size: 12px; }
summary code { overflow-wrap: anywhere; }
dl { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 2px 16px; }
dt { font-weight: 600; } dd { margin: 0; overflow-wrap: anywhere; }
.checks { list-style: none; padding-left: 0; } .check-failed { color: #b00; font-weight: bold; }
.check-flagged { color: #a60; } .check-ok { color: #262; }
"""

# Renders every chart; marks the body with how many rendered so that a reader (and the
# browser test) can tell a finished page from a broken one; shows a failure in place.
SCRIPT = """
(function () {
  const specs = Array.from(document.querySelectorAll('script.chart-spec'));
  const options = {renderer: 'svg', actions: {export: true, source: false,
                   compiled: false, editor: false}};
  Promise.allSettled(specs.map(function (tag) {
    const target = document.getElementById(tag.dataset.target);
    // Parsing inside the promise: one bad spec fails its own chart, not the page.
    return Promise.resolve().then(function () {
      return vegaEmbed(target, JSON.parse(tag.textContent), options);
    }).catch(function (err) {
      target.innerHTML = '<p class="chart-error">This chart failed to render: ' +
                         String(err).replace(/</g, '&lt;') + '</p>';
      throw err;
    });
  })).then(function (results) {
    const failed = results.filter(function (r) { return r.status === 'rejected'; });
    failed.forEach(function (r) { console.error('chart failed:', r.reason); });
    document.body.dataset.charts = (results.length - failed.length) + '/' + results.length;
  });
})();
"""


# --- tables ---------------------------------------------------------------------------

def _table_rank(stem: str) -> tuple[int, str]:
    for rank, prefix in enumerate(TABLE_ORDER):
        if stem.startswith(prefix):
            return rank, stem
    return len(TABLE_ORDER), stem


def table_stems(tables_dir: str | Path) -> list[Path]:
    """Every table in tables_dir (by stem: .md, .csv or both), in reading order."""
    files = list(Path(tables_dir).glob("*.md")) + list(Path(tables_dir).glob("*.csv"))
    stems = {f.with_suffix("") for f in files}
    return sorted(stems, key=lambda s: _table_rank(s.name))


def _markdown_table(text: str, fallback: str) -> tuple[str, str]:
    """The title (the file's leading '## ' heading) and the rest of the markdown as HTML."""
    lines = text.splitlines()
    title = fallback
    if lines and lines[0].startswith("#"):
        title, lines = lines[0].lstrip("#").strip(), lines[1:]
    return title, markdown("\n".join(lines))


def render_table(stem: Path) -> str:
    """One table's section: its markdown when there is one, else its CSV; plus the CSV
    itself as a download that works offline (a data: link)."""
    md, csv = stem.with_suffix(".md"), stem.with_suffix(".csv")
    fallback = stem.name.replace("_", " ").capitalize()
    if md.exists():
        title, body = _markdown_table(md.read_text(encoding="utf-8"), fallback)
    else:
        title, body = fallback, frame_html(pd.read_csv(csv))
    link = ""
    if csv.exists():
        data = base64.b64encode(csv.read_bytes()).decode()
        link = (f'<p class="muted"><a download="{esc(csv.name)}" '
                f'href="data:text/csv;base64,{data}">{esc(csv.name)}</a></p>')
    reading = contents.TABLE_READING.get(stem.name)
    read = f'<p class="read"><strong>Read:</strong> {esc(reading)}</p>' if reading else ""
    return (f'<section id="table-{esc(stem.name)}"><h3>{esc(title)}</h3>'
            f"{read}{body}{link}</section>")


# --- findings -------------------------------------------------------------------------

def findings_section(path: str | Path | None) -> str:
    """The run's findings (results/findings.md: Markdown, a heading per model, a bullet
    per finding with links to its table and chart) as the page's first section; a note
    where none were written."""
    text = Path(path).read_text(encoding="utf-8") if path and Path(path).exists() else ""
    lines = text.strip().splitlines()
    if lines and re.fullmatch(r"#+\s*Findings\s*", lines[0], re.IGNORECASE):
        lines = lines[1:]  # the page's own heading stands for it
    if "\n".join(lines).strip():
        body = markdown("\n".join(lines))
    else:
        body = (f'<p class="muted">No findings were written ({esc(path or results.FINDINGS)} '
                "is missing or empty): the charts and tables below hold the figures, and "
                'the run\'s checks are under <a href="#checks">Checks</a>.</p>')
    return f'<section id="findings"><h2>Findings</h2>{body}</section>'


# --- charts ---------------------------------------------------------------------------

def render_chart(name: str, spec_file: Path) -> str:
    title, question = contents.CHARTS.get(name, (name, ""))
    spec = json.loads(spec_file.read_text(encoding="utf-8"))
    return (f'<section id="chart-{esc(name)}"><h3>{esc(title)}</h3>'
            f'<p class="muted">{esc(question)}</p>'
            f'<div class="chart" id="vis-{esc(name)}"></div>'
            f'<script type="application/json" class="chart-spec" data-target="vis-{esc(name)}">'
            f"{script_json(spec)}</script></section>")


def chart_specs(charts_dir: str | Path) -> list[tuple[str, Path]]:
    """(name, spec file) for each chart written, known charts first in their order."""
    found = {p.name.removesuffix(".vl.json"): p for p in Path(charts_dir).glob("*.vl.json")}
    known = [n for n in contents.CHARTS if n in found]
    return [(n, found[n]) for n in known + sorted(set(found) - set(known))]


# --- the pairs ------------------------------------------------------------------------

# What the run block shows of each host's config (pairs.<pair>.hosts.<a|b>): where it is
# (a cluster profile's SLURM node, or the node feature that picks it).


def _link_configs(link_files: list[str]) -> dict[str, LinkSlice]:
    """Per pair, the config slice its first link result was verified with (metadata
    `config`: the mode, and for an SSH pair its hosts)."""
    found: dict[str, LinkSlice] = {}
    for path in link_files:
        config = parquet_io.provenance(path).get("config") or {}
        pair = config.get("pair") or Path(path).parent.name
        found.setdefault(pair, config)
    return found


def _host_text(pair: str, side: str, mode: Any, host: HostSlice,
               emulations: set[str]) -> str:
    """Where one host of a pair is, as its kind says (`PairKind.host_text`); "—" where
    the results do not say which kind the pair is."""
    kind = pairs.in_results(mode, emulations)
    return kind.host_text(pair, side, host, emulations) if kind else \
        ", ".join(["—", *placed(host)])


def pair_rows(summary: pd.DataFrame, links: pd.DataFrame, link_files: list[str],
              requests: pd.DataFrame, config_pairs: dict[str, PairView] | None = None
              ) -> pd.DataFrame:
    """One row per pair: its mode, where host A and host B are, its links, and when its
    cells were measured (the first request sent, the last one ended). From the config
    slice (`pairs_slice`) where given, else from what the link results record."""
    config_pairs = config_pairs or {}
    recorded = _link_configs(link_files)
    names = list(dict.fromkeys([*config_pairs, *sorted(set(summary.get("pair", [])) |
                                                       set(links.get("pair", [])))]))
    rows = []
    for pair in names:
        spec = config_pairs.get(pair) or {}
        seen = recorded.get(pair, {})
        mode = spec.get("mode") or seen.get("mode")
        hosts = spec.get("hosts") or seen.get("hosts") or {}
        mine = links[links["pair"] == pair] if "pair" in links else links.iloc[0:0]
        emulations = (set(mine["emulation_mode"].dropna()) if "emulation_mode" in mine
                      else set())
        measured = sorted(mine["link"].dropna().unique()) if "link" in mine else []
        names_of_links = spec.get("links") or measured
        sent = requests[requests["pair"] == pair] if "pair" in requests else requests[:0]
        rows.append({
            "pair": pair, "mode": mode or "—",
            "host A": _host_text(pair, "a", mode, hosts.get("a") or {}, emulations),
            "host B": _host_text(pair, "b", mode, hosts.get("b") or {}, emulations),
            "links": ", ".join(names_of_links) or "—",
            "cells": int((summary["pair"] == pair).sum()) if "pair" in summary else 0,
            "cells measured from": clock_text(sent["t_send_ns"].min()) if len(sent) else None,
            "cells measured until": clock_text(sent["t_end_ns"].max()) if len(sent) else None,
        })
    return pd.DataFrame(rows, columns=["pair", "mode", "host A", "host B", "links", "cells",
                                       "cells measured from", "cells measured until"])


# --- the page -------------------------------------------------------------------------

def page(summary_path: str, link_files: list[str], toolchain_files: list[str],
         tables_dir: str, charts_dir: str, request_files: list[str],
         cells_dir: str = results.CELLS,
         drift_path: str | Path | None = None,
         config_pairs: dict[str, PairView] | None = None,
         findings_path: str | Path | None = None) -> str:
    """The whole report as one HTML string: the findings (`findings_path`, Markdown),
    the charts, the tables, the provenance. `config_pairs`: pairs_slice of the config
    (where each pair's hosts are); without it, what the link results record."""
    summary = pq.read_table(summary_path).to_pandas()
    links = cell_summary.read_links(link_files)
    table_html = [render_table(stem) for stem in table_stems(tables_dir)]
    figures = [render_chart(name, spec) for name, spec in chart_specs(charts_dir)]
    requests = request_facts(request_files)
    checks = check_lines(summary, drift_path, links,
                         [json.loads(Path(path).read_text()) for path in toolchain_files])
    provenance = provenance_section(
        summary_path, summary, links, link_files, toolchain_files, request_files, cells_dir,
        requests, pair_rows(summary, links, link_files, requests, config_pairs), checks)
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>splitbench report</title><style>{STYLE}</style>",
        f"<script>{vega.bundle()}</script></head><body>",
        "<header><h1>splitbench report</h1>",
        '<p class="muted">What the link between two machines costs a model split across '
        "them: llama.cpp RPC or vLLM tensor and pipeline parallel, measured per link, "
        "model, context and concurrency.</p>",
        '<nav><a href="#findings">Findings</a><a href="#charts">Charts</a>'
        '<a href="#tables">Tables</a><a href="#provenance">Provenance</a>'
        '<a href="#checks">Checks</a></nav></header>',
        findings_section(findings_path),
        '<section id="charts"><h2>Charts</h2>', *(figures or ["<p>No charts.</p>"]),
        "</section>",
        '<section id="tables"><h2>Tables</h2>', *(table_html or ["<p>No tables.</p>"]),
        "</section>", provenance, f"<script>{SCRIPT}</script></body></html>",
    ])


def write(out: str, **inputs: Any) -> int:
    """Write the page to out; returns its size in bytes."""
    text = page(**inputs)
    files.write_text(Path(out), text)
    return len(text.encode())
