"""The report's provenance: which builds, links, launches and code made each figure,
and when each cell was measured."""

from __future__ import annotations

import datetime as dt
import html
import json
import shlex
from pathlib import Path
from typing import Any

import pandas as pd

from splitbench import backends, version
from splitbench.contracts import registry, results
from splitbench.contracts.marks import FLAG_MARK
from splitbench.infra import parquet_io
from splitbench.report import chart_parts
from splitbench.report.html_parts import dl, esc, frame_html, short
from splitbench.summary import cell_summary


def _toolchain_rows(toolchain_files: list[str]) -> pd.DataFrame:
    """Each pair's toolchain, a row per host, in its backend's words
    (`Backend.toolchain_rows`)."""
    rows = []
    for path in toolchain_files:
        record = json.loads(Path(path).read_text())
        rows += backends.get(record.get("backend") or registry.DEFAULT).toolchain_rows(record)
    return pd.DataFrame(rows)


LINK_PROVENANCE = ["pair", "link", "emulation_mode", "emulation_rate", "emulation_delay",
                   "emulated_rate_gbit_a_to_b", "emulated_rate_gbit_b_to_a",
                   "emulated_delay_ms", "ping_includes_delay", "interface_a", "interface_b",
                   "kernel_a", "kernel_b", "iperf3_version", "sockperf_version",
                   "measured_at", "fingerprint", "flags"]


def _links_rows(links: pd.DataFrame) -> pd.DataFrame:
    return links[[c for c in LINK_PROVENANCE if c in links.columns]]


def clock_text(ns: Any) -> str | None:
    if ns is None or pd.isna(ns):
        return None
    return dt.datetime.fromtimestamp(int(ns) / 1e9, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _iso(text: str) -> str:
    return pd.Timestamp(text).tz_convert("UTC").strftime("%Y-%m-%d %H:%M:%S UTC")


# What the provenance reads from every request file, in one pass.
REQUEST_FACTS = ["t_send_ns", "t_end_ns", "arrival_clock", "generated_tokens"]


def request_facts(request_files: list[str]) -> pd.DataFrame:
    columns = ["pair", *REQUEST_FACTS]
    if not request_files:
        return pd.DataFrame(columns=columns)
    return cell_summary.read_requests(request_files, REQUEST_FACTS).reindex(columns=columns)


def _cell_dates(rows: pd.DataFrame) -> dict[str, str | None]:
    """When the first request was sent and the last one ended, over every cell."""
    if rows.empty:
        return {"cells measured from": None, "cells measured until": None}
    return {"cells measured from": clock_text(rows["t_send_ns"].min()),
            "cells measured until": clock_text(rows["t_end_ns"].max())}


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
                     "backend": (launch.get("settings") or {}).get("backend", registry.DEFAULT),
                     "settings": json.dumps(launch.get("settings")),
                     "started": clock_text(started * 1e9) if started else None,
                     "load s": launch.get("load_s"),
                     "sent to B while loading (MB)": _megabytes(launch.get("load_bytes")),
                     "sent again (MB)": _megabytes(launch.get("load_bytes"),
                                                   "a_to_b_resent"),
                     "tensor cache": _cache_text(launch.get("tensor_cache")),
                     "placement": json.dumps(launch.get("placement"))})
        lines = [shlex.join(argv) for argv in _argvs(launch.get("commands", {}))]
        commands.append(f"# launch {launch_id}\n" + "\n".join(lines))
    text = html.escape("\n\n".join(commands))
    block = f"<details><summary>command lines</summary><pre>{text}</pre></details>"
    return pd.DataFrame(rows), block


def _megabytes(load_bytes: dict | None, key: str = "a_to_b") -> float | None:
    """A→B bytes of a launch's load (`key`: B received them, or A sent them again), in
    MB (None: not counted)."""
    if not load_bytes or load_bytes.get(key) is None:
        return None
    return round(load_bytes[key] / 1e6, 1)


def _cache_text(cache: dict | None) -> str | None:
    """A launch's tensor cache as the table says it (None: a launch from before it)."""
    if cache is None:
        return None
    return (f"on ({cache['dir']})" if cache.get("dir")
            else f"off: {cache.get('why_not', 'not recorded')}")


def _metadata_details(label: str, path: str | Path) -> str:
    meta = short(parquet_io.provenance(path))
    text = html.escape(json.dumps(meta, indent=1, default=str))
    return (f"<details><summary>{esc(label)}: <code>{esc(path)}</code></summary>"
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
    request_facts(request_files), where already read."""
    summary_meta = parquet_io.provenance(summary_path)
    if requests is None:
        requests = request_facts(request_files)
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
        "links in run order": _link_order(results.BLOCK_ORDER),
    }
    launches = _launch_files(summary, cells_dir)
    launch_rows, launch_commands = _launch_rows(launches)
    details = [_metadata_details("summary", summary_path)]
    details += [_metadata_details(f"link {Path(p).parent.name}/{Path(p).stem}", p)
                for p in link_files]
    details += [_metadata_details(f"cell (launch {k})", p) for k, p in launches.items()]
    pairs = [] if pair_table is None else ['<h3 id="pairs">Pairs</h3>',
                                           frame_html(pair_table)]
    return "".join([
        '<section id="provenance"><h2>Provenance</h2>', '<h3 id="run">Run</h3>', dl(facts),
        *pairs,
        "<h3>Toolchain on each host</h3>", frame_html(_toolchain_rows(toolchain_files)),
        "<h3>Links as set up (emulation really applied)</h3>", frame_html(_links_rows(links)),
        "<h3>Server launches</h3>", frame_html(launch_rows), launch_commands,
        '<h3 id="checks">Checks</h3>', _checks_html(checks or []),
        "<h3>Parquet provenance metadata</h3>",
        '<p class="muted">Schema metadata key <code>splitbench</code> of each file; long '
        "values are cut here, the files keep them whole.</p>", *details, "</section>",
    ])


def _link_order(order_file: str | Path) -> str | None:
    """Each pair's links in the order their blocks ran (plan.record_order), from the
    first model's blocks: the order turns between runs."""
    path = Path(order_file)
    if not path.exists():
        return None
    recorded = json.loads(path.read_text())
    runs: dict[str, list[str]] = {}
    for block in recorded.get("blocks", []):
        pair, link, _model = block.split("/", 2)
        if link not in runs.setdefault(pair, []):
            runs[pair].append(link)
    return "; ".join(f"{pair}: {' → '.join(links)}" for pair, links in runs.items()) \
        + f" (rotation {recorded.get('rotation')})"


def _overview(summary: pd.DataFrame) -> dict[str, str]:
    """The run's matrix: its pairs, links, models, contexts, levels and cells."""
    statuses = summary["status"].value_counts().to_dict() if not summary.empty else {}
    return {
        "pairs": ", ".join(sorted(summary["pair"].unique())),
        "links": ", ".join(sorted(summary["link"].unique())),
        "models": ", ".join(sorted(summary["model"].unique())),
        "contexts": ", ".join(chart_parts.ctx_order(summary)),
        "concurrency": ", ".join(str(c) for c in sorted(summary["conc"].unique())),
        "cells": f"{len(summary)} (" + ", ".join(f"{k}: {v}" for k, v in
                                                 sorted(statuses.items())) + ")",
    }


def _checks_html(lines: list[tuple[str, str]]) -> str:
    marks = {"failed": "✗", "flagged": FLAG_MARK, "ok": "✓"}
    items = "".join(f'<li class="check-{state}">{marks[state]} {esc(text)}</li>'
                    for state, text in lines)
    return f'<ul class="checks">{items}</ul>'
