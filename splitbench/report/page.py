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

import argparse
import base64
import datetime as dt
import html
import json
import re
import shlex
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd
import pyarrow.parquet as pq
import vl_convert
from markdown_it import MarkdownIt

from splitbench import results, version
from splitbench.analysis import cell_summary
from splitbench.analysis.checks import check_lines
from splitbench.analysis.marks import FLAG_MARK
from splitbench.infra import files, parquet_io
from splitbench.links import lab
from splitbench.report import charts, contents
from splitbench.stage import Stage, json_arg

# Tables in the seed write-up's order; stems that match none come after, by name.
TABLE_ORDER = ["links", "link_comparison", "link_traffic", "single_stream_decode",
               "single_stream_prefill", "single_stream", "ttft", "concurrency", "boundary",
               "overlap", "pairs", "mechanism", "round_trips"]
# Long provenance values (a probe's source code passed with -c) are cut to this.
MAX_TEXT = 400
# A table cell longer than this (characters) wraps within its column; shorter ones (a
# figure and its ±) stay on one line. In a wrapping cell too a figure keeps its ±.
LONG_CELL = 24

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


def _esc(value: Any) -> str:
    return html.escape("—" if value is None or value == "" else str(value))


def _script_json(value: Any) -> str:
    """Strict JSON safe inside a <script> element: no '<' can close it early."""
    return json.dumps(charts.finite(value), allow_nan=False).replace("<", "\\u003c")


def _short(value: Any) -> Any:
    """Provenance with long strings cut, for reading (the Parquet keeps them whole)."""
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_short(v) for v in value]
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return f"{value[:MAX_TEXT]}… ({len(value)} characters)"
    return value


def _dl(items: dict[str, Any]) -> str:
    rows = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in items.items())
    return f"<dl>{rows}</dl>"


_CELL = re.compile(r"<td([^>]*)>(.*?)</td>", re.S)


def _wrap_long_cells(table_html: str) -> str:
    """Marks each cell longer than LONG_CELL characters (its text, tags aside) with class
    "long": it wraps, where every other cell stays on one line."""
    def mark(cell: re.Match) -> str:
        text = html.unescape(re.sub(r"<[^>]+>", "", cell[2]))
        if len(text) <= LONG_CELL:
            return cell[0]
        return f'<td class="long"{cell[1]}>{cell[2].replace(" ±", "&nbsp;±")}</td>'
    return _CELL.sub(mark, table_html)


def _frame_html(frame: pd.DataFrame) -> str:
    shown = frame.astype(object).where(frame.notna(), "—")
    table = _wrap_long_cells(shown.to_html(index=False, escape=True, border=0))
    # Column names as the Parquet spells them (emulated_rate_gbit_a_to_b) may break
    # after an underscore.
    table = re.sub(r"<th([^>]*)>(.*?)</th>",
                   lambda th: f"<th{th[1]}>{th[2].replace('_', '_<wbr>')}</th>", table)
    return f'<div class="table-wrap">{table}</div>'


def _markdown(text: str) -> str:
    """Markdown (CommonMark and tables, raw HTML escaped) as HTML, each table in its own
    scrolling box and its long cells wrapping. Tables carry text from outside (a server's
    error, a host's reply), so the page makes no image and no link that leaves it: an
    image's syntax stays text, a link only goes to a place on the page or beside it."""
    parser = MarkdownIt("commonmark", {"html": False}).enable("table").disable("image")
    parser.validateLink = _link_stays_here
    body = parser.render(text)
    body = body.replace("<table>", '<div class="table-wrap"><table>').replace(
        "</table>", "</table></div>")
    return _wrap_long_cells(body)


def _link_stays_here(url: str) -> bool:
    """A link to an anchor on the page or a path beside it: no scheme (http:, data:,
    javascript:), no host (//...)."""
    url = url.strip()
    return not url.startswith("//") and re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", url) is None


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
    return title, _markdown("\n".join(lines))


def render_table(stem: Path) -> str:
    """One table's section: its markdown when there is one, else its CSV; plus the CSV
    itself as a download that works offline (a data: link)."""
    md, csv = stem.with_suffix(".md"), stem.with_suffix(".csv")
    fallback = stem.name.replace("_", " ").capitalize()
    if md.exists():
        title, body = _markdown_table(md.read_text(encoding="utf-8"), fallback)
    else:
        title, body = fallback, _frame_html(pd.read_csv(csv))
    link = ""
    if csv.exists():
        data = base64.b64encode(csv.read_bytes()).decode()
        link = (f'<p class="muted"><a download="{_esc(csv.name)}" '
                f'href="data:text/csv;base64,{data}">{_esc(csv.name)}</a></p>')
    reading = contents.TABLE_READING.get(stem.name)
    read = f'<p class="read"><strong>Read:</strong> {_esc(reading)}</p>' if reading else ""
    return (f'<section id="table-{_esc(stem.name)}"><h3>{_esc(title)}</h3>'
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
        body = _markdown("\n".join(lines))
    else:
        body = (f'<p class="muted">No findings were written ({_esc(path or results.FINDINGS)} '
                "is missing or empty): the charts and tables below hold the figures, and "
                'the run\'s checks are under <a href="#checks">Checks</a>.</p>')
    return f'<section id="findings"><h2>Findings</h2>{body}</section>'


# --- charts ---------------------------------------------------------------------------

def render_chart(name: str, spec_file: Path) -> str:
    title, question = contents.CHARTS.get(name, (name, ""))
    spec = json.loads(spec_file.read_text(encoding="utf-8"))
    return (f'<section id="chart-{_esc(name)}"><h3>{_esc(title)}</h3>'
            f'<p class="muted">{_esc(question)}</p>'
            f'<div class="chart" id="vis-{_esc(name)}"></div>'
            f'<script type="application/json" class="chart-spec" data-target="vis-{_esc(name)}">'
            f"{_script_json(spec)}</script></section>")


def chart_specs(charts_dir: str | Path) -> list[tuple[str, Path]]:
    """(name, spec file) for each chart written, known charts first in their order."""
    found = {p.name.removesuffix(".vl.json"): p for p in Path(charts_dir).glob("*.vl.json")}
    known = [n for n in contents.CHARTS if n in found]
    return [(n, found[n]) for n in known + sorted(set(found) - set(known))]


def vega_bundle() -> str:
    """Vega, Vega-Lite (the version altair writes) and Vega-Embed as one script."""
    major, minor = alt.SCHEMA_VERSION.lstrip("v").split(".")[:2]
    bundle = vl_convert.javascript_bundle(vl_version=f"v{major}_{minor}")
    # Inside a <script> element, only '</script' could end it early.
    return re.sub(r"</(script)", r"<\\/\1", bundle, flags=re.IGNORECASE)


# --- provenance -----------------------------------------------------------------------

def _toolchain_rows(toolchain_files: list[str]) -> pd.DataFrame:
    rows = []
    for path in toolchain_files:
        record = json.loads(Path(path).read_text())
        for side in ("a", "b"):
            host = record.get(side, {})
            rows.append({
                "pair": record.get("pair"), "host": side.upper(),
                # A pair whose toolchain could not be had: why (its blocks did not launch).
                "status": record.get("status", "ok"),
                "error": record.get("error"),
                "llama-server version": host.get("llama_server_version"),
                "build id": host.get("build_id"), "source": record.get("source"),
                "package": host.get("package"),
                "llama-server sha256": (host.get("llama-server_sha256") or "")[:16],
                "ggml-rpc-server sha256": (host.get("ggml-rpc-server_sha256") or "")[:16],
                "bin dir": host.get("bin_dir"),
            })
    return pd.DataFrame(rows)


LINK_PROVENANCE = ["pair", "link", "emulation_mode", "emulation_rate", "emulation_delay",
                   "emulated_rate_gbit_a_to_b", "emulated_rate_gbit_b_to_a",
                   "emulated_delay_ms", "ping_includes_delay", "interface_a", "interface_b",
                   "kernel_a", "kernel_b", "iperf3_version", "sockperf_version",
                   "measured_at", "fingerprint", "flags"]


def _links_rows(links: pd.DataFrame) -> pd.DataFrame:
    return links[[c for c in LINK_PROVENANCE if c in links.columns]]


def _clock(ns: Any) -> str | None:
    if ns is None or pd.isna(ns):
        return None
    return dt.datetime.fromtimestamp(int(ns) / 1e9, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _iso(text: str) -> str:
    return pd.Timestamp(text).tz_convert("UTC").strftime("%Y-%m-%d %H:%M:%S UTC")


# What the provenance reads from every request file, in one pass.
REQUEST_FACTS = ["t_send_ns", "t_end_ns", "arrival_clock", "generated_tokens"]


def _request_facts(request_files: list[str]) -> pd.DataFrame:
    columns = ["pair", *REQUEST_FACTS]
    if not request_files:
        return pd.DataFrame(columns=columns)
    return cell_summary.read_requests(request_files, REQUEST_FACTS).reindex(columns=columns)


def _cell_dates(rows: pd.DataFrame) -> dict[str, str | None]:
    """When the first request was sent and the last one ended, over every cell."""
    if rows.empty:
        return {"cells measured from": None, "cells measured until": None}
    return {"cells measured from": _clock(rows["t_send_ns"].min()),
            "cells measured until": _clock(rows["t_end_ns"].max())}


def _arrival_clocks(rows: pd.DataFrame) -> str | None:
    """How many requests' token times came from which clock."""
    clocks = rows.loc[rows["generated_tokens"] > 0, "arrival_clock"]  # those with tokens
    names = {"segment": "per-segment arrival (packet socket)",
             "kernel": "kernel receive stamps of the last segment of each read",
             "read": "when the read returned",
             "mixed": "both", "unrecorded": "not recorded (measured before splitbench "
                                            "recorded it: when the read returned)"}
    counts = clocks.fillna("unrecorded").value_counts()
    if counts.empty:
        return None
    return "; ".join(f"{names.get(k, k)}: {n} requests" for k, n in counts.items())


def _launch_files(summary: pd.DataFrame, cells_dir: str | Path) -> dict[str, Path]:
    """One request file per server launch: its metadata holds the launch's commands."""
    files = {}
    for row in summary.drop_duplicates("server_launch_id").itertuples():
        path = Path(results.cell_requests(row.pair, row.link, row.model, row.ctx, row.conc,
                                          root=Path(cells_dir).parent))
        if path.exists():
            files[str(row.server_launch_id)] = path
    return files


def _argvs(commands: dict) -> list[list[str]]:
    """Every command line of a launch: llama-server and its RPC workers, or vLLM's two
    ranks (one argument list each, or a list of them); anything else is left out."""
    out = []
    for value in commands.values():
        if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
            out += value
        elif isinstance(value, list) and value:
            out.append(value)
    return [[str(arg) for arg in argv] for argv in out]


def _launch_rows(launch_files: dict[str, Path]) -> tuple[pd.DataFrame, str]:
    """A row per launch, and its exact command lines (too long for a table cell)."""
    rows, commands = [], []
    for launch_id, path in launch_files.items():
        launch = parquet_io.provenance(path).get("launch") or {}
        if isinstance(launch, list):  # one record per repeat of the cell
            launch = next((item for item in launch if item), {})
        started = launch.get("started_at")
        rows.append({"launch": launch_id, "pair": launch.get("pair"),
                     "link": launch.get("link"),
                     "backend": (launch.get("settings") or {}).get("backend", "llamacpp"),
                     "settings": json.dumps(launch.get("settings")),
                     "started": _clock(started * 1e9) if started else None,
                     "load s": launch.get("load_s"),
                     "placement": json.dumps(launch.get("placement"))})
        lines = [shlex.join(argv) for argv in _argvs(launch.get("commands", {}))]
        commands.append(f"# launch {launch_id}\n" + "\n".join(lines))
    text = html.escape("\n\n".join(commands))
    block = f"<details><summary>command lines</summary><pre>{text}</pre></details>"
    return pd.DataFrame(rows), block


def _metadata_details(label: str, path: str | Path) -> str:
    meta = _short(parquet_io.provenance(path))
    text = html.escape(json.dumps(meta, indent=1, default=str))
    return (f"<details><summary>{_esc(label)}: <code>{_esc(path)}</code></summary>"
            f"<pre>{text}</pre></details>")


def provenance_section(summary_path: str, summary: pd.DataFrame, links: pd.DataFrame,
                       link_files: list[str], toolchain_files: list[str],
                       request_files: list[str], cells_dir: str | Path,
                       requests: pd.DataFrame | None = None,
                       pair_table: pd.DataFrame | None = None,
                       checks: list[tuple[str, str]] | None = None) -> str:
    """The page's last section: the run (its matrix, versions and dates; `pair_table`,
    pair_rows' table), the builds, the links as emulated, the launches, the run's
    `checks` (check_lines) and the Parquet files' own metadata. `requests`:
    _request_facts(request_files), where already read."""
    summary_meta = parquet_io.provenance(summary_path)
    if requests is None:
        requests = _request_facts(request_files)
    measured = links["measured_at"].dropna() if "measured_at" in links else pd.Series()
    facts = {
        **_overview(summary),
        "report written": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "splitbench (report)": version.described(),
        "splitbench (summary)": " ".join(str(x) for x in (
            summary_meta.get("splitbench_version"),
            f"(commit {summary_meta['code_commit']})" if summary_meta.get("code_commit")
            else None) if x),
        "links measured from": _iso(measured.min()) if len(measured) else None,
        "links measured until": _iso(measured.max()) if len(measured) else None,
        **_cell_dates(requests),
        "token times from": _arrival_clocks(requests),
    }
    launches = _launch_files(summary, cells_dir)
    launch_rows, launch_commands = _launch_rows(launches)
    details = [_metadata_details("summary", summary_path)]
    details += [_metadata_details(f"link {Path(p).parent.name}/{Path(p).stem}", p)
                for p in link_files]
    details += [_metadata_details(f"cell (launch {k})", p) for k, p in launches.items()]
    pairs = [] if pair_table is None else ['<h3 id="pairs">Pairs</h3>',
                                           _frame_html(pair_table)]
    return "".join([
        '<section id="provenance"><h2>Provenance</h2>', '<h3 id="run">Run</h3>', _dl(facts),
        *pairs,
        "<h3>llama.cpp on each host</h3>", _frame_html(_toolchain_rows(toolchain_files)),
        "<h3>Links as set up (emulation really applied)</h3>", _frame_html(_links_rows(links)),
        "<h3>Server launches</h3>", _frame_html(launch_rows), launch_commands,
        '<h3 id="checks">Checks</h3>', _checks_html(checks or []),
        "<h3>Parquet provenance metadata</h3>",
        '<p class="muted">Schema metadata key <code>splitbench</code> of each file; long '
        "values are cut here, the files keep them whole.</p>", *details, "</section>",
    ])


# --- the pairs ------------------------------------------------------------------------

# What the run block shows of each host's config (pairs.<pair>.hosts.<a|b>): where it is
# (a cluster profile's SLURM node, or the node feature that picks it).


def _link_configs(link_files: list[str]) -> dict[str, dict[str, Any]]:
    """Per pair, the config slice its first link result was verified with (metadata
    `config`: the mode, and for an SSH pair its hosts)."""
    found: dict[str, dict[str, Any]] = {}
    for path in link_files:
        config = parquet_io.provenance(path).get("config") or {}
        pair = config.get("pair") or Path(path).parent.name
        found.setdefault(pair, config)
    return found


def _host_text(pair: str, side: str, mode: Any, host: dict[str, Any],
               emulations: set[str]) -> str:
    """Where one host of a pair is: the namespace or machine of an embedded pair (what
    its link results record), the machine splitbench runs on for an SSH pair's A, the
    SSH destination of its B; the SLURM node (or the node feature that picks it) where
    the config names one."""
    where = [f"node {host['node']}"] if host.get("node") else []
    where += [f"a node with feature {host['feature']}"] if host.get("feature") else []
    if mode == "embedded" or (mode is None and emulations & {"netns-veth", "loopback"}):
        if "netns-veth" in emulations:
            text = f"embedded (namespace {lab.namespace(pair, side)})"
        elif emulations == {"loopback"}:
            text = "embedded (this machine, loopback: no namespaces without root)"
        else:
            text = "embedded"
        return ", ".join([text, *where])
    if side == "a":
        return f"{', '.join(where) or 'this machine'} (runs splitbench)"
    if host.get("ssh"):
        port = f" port {host['ssh_port']}" if host.get("ssh_port") else ""
        return ", ".join([f"ssh {host['ssh']}{port}", *where])
    return ", ".join(["this machine" if mode == "ssh" else "—", *where])


def pair_rows(summary: pd.DataFrame, links: pd.DataFrame, link_files: list[str],
              requests: pd.DataFrame, config_pairs: dict[str, Any] | None = None
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
            "cells measured from": _clock(sent["t_send_ns"].min()) if len(sent) else None,
            "cells measured until": _clock(sent["t_end_ns"].max()) if len(sent) else None,
        })
    return pd.DataFrame(rows, columns=["pair", "mode", "host A", "host B", "links", "cells",
                                       "cells measured from", "cells measured until"])


# --- the page -------------------------------------------------------------------------

def _overview(summary: pd.DataFrame) -> dict[str, str]:
    """The run's matrix: its pairs, links, models, contexts, levels and cells."""
    statuses = summary["status"].value_counts().to_dict() if not summary.empty else {}
    return {
        "pairs": ", ".join(sorted(summary["pair"].unique())),
        "links": ", ".join(sorted(summary["link"].unique())),
        "models": ", ".join(sorted(summary["model"].unique())),
        "contexts": ", ".join(charts.ctx_order(summary)),
        "concurrency": ", ".join(str(c) for c in sorted(summary["conc"].unique())),
        "cells": f"{len(summary)} (" + ", ".join(f"{k}: {v}" for k, v in
                                                 sorted(statuses.items())) + ")",
    }


def _checks_html(lines: list[tuple[str, str]]) -> str:
    marks = {"failed": "✗", "flagged": FLAG_MARK, "ok": "✓"}
    items = "".join(f'<li class="check-{state}">{marks[state]} {_esc(text)}</li>'
                    for state, text in lines)
    return f'<ul class="checks">{items}</ul>'


def page(summary_path: str, link_files: list[str], toolchain_files: list[str],
         tables_dir: str, charts_dir: str, request_files: list[str],
         cells_dir: str = results.CELLS,
         drift_path: str | Path | None = None,
         config_pairs: dict[str, Any] | None = None,
         findings_path: str | Path | None = None) -> str:
    """The whole report as one HTML string: the findings (`findings_path`, Markdown),
    the charts, the tables, the provenance. `config_pairs`: pairs_slice of the config
    (where each pair's hosts are); without it, what the link results record."""
    summary = pq.read_table(summary_path).to_pandas()
    links = cell_summary.read_links(link_files)
    table_html = [render_table(stem) for stem in table_stems(tables_dir)]
    figures = [render_chart(name, spec) for name, spec in chart_specs(charts_dir)]
    requests = _request_facts(request_files)
    checks = check_lines(summary, drift_path, links,
                         [json.loads(Path(path).read_text()) for path in toolchain_files])
    provenance = provenance_section(
        summary_path, summary, links, link_files, toolchain_files, request_files, cells_dir,
        requests, pair_rows(summary, links, link_files, requests, config_pairs), checks)
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>splitbench report</title><style>{STYLE}</style>",
        f"<script>{vega_bundle()}</script></head><body>",
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


# --- the `report` stage -------------------------------------------------------------
def _report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--summary", required=True)
    p.add_argument("--links", nargs="+", required=True)
    p.add_argument("--toolchain", nargs="+", required=True)
    p.add_argument("--requests", nargs="+", required=True)
    p.add_argument("--cells", default=results.CELLS, help="where the cell Parquet lies")
    p.add_argument("--tables", required=True, help="directory of the tables (.md, .csv)")
    p.add_argument("--charts", required=True, help="directory of the charts (.vl.json)")
    p.add_argument("--drift", default=None, help="the drift step's report.parquet")
    p.add_argument("--pairs", type=json_arg, default={},
                   help="where each pair's hosts are (JSON, pairs_slice of the config)")
    p.add_argument("--findings", default=None,
                   help="the run's findings (Markdown), the page's first section; a "
                        "missing file gives a note that none were written")
    p.add_argument("--out", required=True)


def _report(args: argparse.Namespace) -> None:
    size = write(args.out, summary_path=args.summary, link_files=args.links,
                 toolchain_files=args.toolchain, tables_dir=args.tables,
                 charts_dir=args.charts, request_files=args.requests, cells_dir=args.cells,
                 drift_path=args.drift, config_pairs=args.pairs,
                 findings_path=args.findings)
    print(f"report: {args.out} ({size / 1e6:.2f} MB)")


STAGES = (
    Stage("report", "one offline HTML page: tables, charts, provenance", _report_arguments,
          _report),
)
