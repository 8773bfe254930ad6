"""The run's checks: what did not work (a toolchain, a link, a launch), whether the drift
check ran, and whether cells were measured under interference. The `checks` stage prints
them last, after the report is written, and fails the run for what did not work."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from splitbench.contracts import findings_file, results
from splitbench.contracts.marks import FLAG_MARK
from splitbench.contracts.records import ToolchainRecord
from splitbench.infra import parquet_io
from splitbench.summary import cell_summary


def check_lines(summary: pd.DataFrame, drift_path: str | Path | None,
                links: pd.DataFrame | None = None,
                toolchains: list[ToolchainRecord] | None = None) -> list[tuple[str, str]]:
    """(state, text) per check the run block reports: "failed", "flagged" or "ok". A check
    that did not run is a failure, never a clean line. `links`: the link results, for
    the links that failed verification; `toolchains`: the pairs' toolchain records, for
    the pairs whose toolchain could not be had."""
    lines: list[tuple[str, str]] = [("failed", text) for text in
                                    [*toolchain_failures(toolchains), *link_failures(links)]]
    if drift_path is None or not Path(drift_path).exists():
        lines.append(("failed", f"drift: not run (no {drift_path or results.DRIFT_REPORT}): "
                                "no cell is checked for drift"))
    else:
        meta = parquet_io.provenance(drift_path)
        for block in meta.get("blocks", []):
            name = f"{block['pair']}/{block['model']}"
            if block["outcome"] == "failed":
                lines.append(("failed", f"drift check FAILED for {name}: {block['why']}"))
            elif block["outcome"] == "drifted":
                lines.append(("flagged", f"drift: {name} {block['why']}"))
            else:
                lines.append(("ok", f"drift: {name} steady"))
        unchecked = len(meta.get("unchecked", []))
        if unchecked:
            lines.append(("failed", f"{unchecked} cell(s) not checked for drift"))
        if not meta.get("blocks"):
            if (meta.get("settings") or {}).get("anchor_tolerance", 0) is None:
                lines.append(("flagged", "drift: anchors not compared "
                                         "(drift.anchor_tolerance is null)"))
            else:
                lines.append(("failed", "drift: no anchor check ran"))
    lines += [("failed", text) for text in load_failures(summary)]
    # A block that never loaded measured nothing that interference could disturb (its
    # own line above says so): the interference check counts the cells that ran.
    if "status" in summary:
        summary = summary[summary["status"] != "load"]
    cells = len(summary)
    checked = summary.get("interference_checked", pd.Series(False, index=summary.index))
    flagged = summary.get("interference", pd.Series(None, index=summary.index)).notna()
    timing = summary.get("timing", pd.Series(None, index=summary.index)).notna()
    if (~checked.astype(bool)).any():
        lines.append(("failed", f"interference: not measured for {int((~checked).sum())} of "
                                f"{cells} cells (no CPU figures): not checked"))
    if flagged.any():
        lines.append(("flagged", f"interference: {int(flagged.sum())} of {cells} cells "
                                 f"measured while other work used the CPUs "
                                 f"({FLAG_MARK} in the tables)"))
    elif checked.astype(bool).all() and cells:
        lines.append(("ok", f"interference: none above the limits in {cells} cells"))
    for side in ("a", "b"):
        held = summary.get(f"wakeup_latency_{side}")
        if held is None:
            continue
        loose = held.notna() & (held != "held at 0 us")
        if loose.any():
            lines.append(("flagged", f"wake-up latency not held on host {side.upper()} for "
                                     f"{int(loose.sum())} of {cells} cells: "
                                     f"{held[loose].iloc[0]}"))
    lines += pace_lines(summary)
    if timing.any():
        # Two kinds of flag: tokens that share a read's stamp, and a client that
        # disagrees with the server's own timing; the first cell's says which.
        first = summary[timing].iloc[0]
        lines.append(("flagged", f"token times: {int(timing.sum())} of {cells} cells "
                                 f"flagged ({FLAG_MARK}), the first {first['link']} "
                                 f"{first['ctx']} x{first['conc']}: {first['timing']}"))
    return lines


def pace_lines(summary: pd.DataFrame) -> list[tuple[str, str]]:
    """Per pair with a run-to-run calibration: whether this run's machine ran at a pace
    the calibration's runs spanned (the median over its ok cells of each one's decode
    against the calibration's mean for it). Outside, each cell's ± holds the variation
    of other days than this one: flagged; a link's cost, a difference inside this run,
    is not touched."""
    if "calibration_pace" not in summary:
        return []
    lines = []
    ok = summary[summary.get("status", pd.Series("ok", index=summary.index)) == "ok"]
    for pair, cells in ok.groupby("pair"):
        pace = pd.to_numeric(cells["calibration_pace"], errors="coerce").dropna()
        if pace.empty:
            continue
        now = float(pace.median())
        low = float(cells["calibration_pace_low"].iloc[0])
        high = float(cells["calibration_pace_high"].iloc[0])
        said = (f"machine pace: {pair}'s cells took {now:+.0%} time per decoded token "
                f"against the calibration runs' mean (their own runs spanned {low:+.0%} "
                f"to {high:+.0%})")
        if low <= now <= high:
            lines.append(("ok", said))
        else:
            lines.append(("flagged", f"{said}: a day they did not see, so each cell's ± "
                                     "may be too narrow; the links' costs, differences "
                                     "inside this run, are not affected"))
    return lines


def link_failures(links: pd.DataFrame | None) -> list[str]:
    """One line per link that failed verification, with its reason (first line)."""
    if links is None or "status" not in links:
        return []
    return [f"link {r.pair}/{r.link} failed verification (its blocks were not launched): "
            f"{str(r.error).splitlines()[0]}"
            for r in links[links["status"] == "failed"].itertuples()]


def toolchain_failures(toolchains: list[ToolchainRecord] | None) -> list[str]:
    """One line per pair whose toolchain could not be had (host B unreachable, a binary
    missing, two builds), with its reason (first line)."""
    return [f"pair {t.get('pair')}: toolchain failed (its blocks were not launched): "
            f"{str(t.get('error')).splitlines()[0]}"
            for t in toolchains or [] if t.get("status") == "failed"]


def run_toolchains(root: str | Path, summary: pd.DataFrame) -> list[ToolchainRecord]:
    """The toolchain records under `root` of the pairs the summary holds."""
    pairs = set(summary["pair"]) if "pair" in summary else set()
    found = sorted(Path(results.under(root, results.TOOLCHAIN.format(pair="x"))).parent
                   .glob("*.json"))
    records = [json.loads(path.read_text()) for path in found]
    return [r for r in records if r.get("pair") in pairs]


def run_links(root: str | Path, summary: pd.DataFrame) -> pd.DataFrame:
    """The link results under `root` of the pairs and links the summary holds (a link
    left from an earlier config is not this run's)."""
    found = sorted(Path(results.under(root, results.LINKS)).glob("*/*.parquet"))
    links = cell_summary.read_links([str(p) for p in found])
    if links.empty or summary.empty:
        return links.iloc[0:0]
    ours = set(zip(summary["pair"], summary["link"], strict=True))
    return links[[key in ours for key in zip(links["pair"], links["link"], strict=True)]]


def load_failures(summary: pd.DataFrame) -> list[str]:
    """One line per block whose servers never came up: which, how many cells that cost,
    and why (the launch's reason, its first line)."""
    failed = summary[summary["status"] == "load"] if "status" in summary else summary[:0]
    out = []
    for (pair, link, model), cells in failed.groupby(["pair", "link", "model"]):
        reason = next((e for e in cells.get("error", pd.Series(dtype=object))
                       if isinstance(e, str)), "no reason recorded")
        reason = reason.replace("the block's launch failed: ", "").splitlines()[0]
        out.append(f"{pair}/{link}/{model} did not load ({len(cells)} cells not measured): "
                   f"{reason}")
    return out


# A table that marks more than this share of its rows says little by its marks: the run
# says so (a flag should fire only where something is wrong).
FLAGGED_ROWS_MAX = 0.25


def flagged_tables(tables_dir: str | Path) -> list[tuple[str, str]]:
    """("flagged", text) for each table (results/tables/*.csv) that marks more than
    FLAGGED_ROWS_MAX of its rows with FLAG_MARK; ("ok", text) when none does."""
    lines = []
    for path in sorted(Path(tables_dir).glob("*.csv")):
        try:
            table = pd.read_csv(path, dtype=str)
        except (pd.errors.EmptyDataError, pd.errors.ParserError):
            continue
        if table.empty:
            continue
        marked = table.apply(lambda row: any(FLAG_MARK in str(v) for v in row), axis=1)
        if marked.mean() > FLAGGED_ROWS_MAX:
            lines.append(("flagged", f"table {path.stem}: {FLAG_MARK} on {int(marked.sum())} "
                                     f"of {len(table)} rows (the notes under it say why)"))
    return lines or [("ok", f"no table marks more than {FLAGGED_ROWS_MAX:.0%} of its rows")]


def run_checks(root: str | Path, out: str | Path) -> list[str]:
    """The checks of the finished run under `root`, written to `out` and printed (failed
    first); returns the links that failed verification and the blocks that did not load
    (the run's exit status says so)."""
    summary = pq.read_table(results.under(root, results.SUMMARY)).to_pandas()
    links = run_links(root, summary)
    toolchains = run_toolchains(root, summary)
    lines = check_lines(summary, results.under(root, results.DRIFT_REPORT), links,
                        toolchains) + flagged_tables(results.under(root, results.TABLES))
    order = {"failed": 0, "flagged": 1, "ok": 2}
    marks = {"failed": "FAILED", "flagged": "flagged", "ok": "ok"}
    text = "".join(f"splitbench check {marks[state]}: {line}\n"
                   for state, line in sorted(lines, key=lambda line: order[line[0]]))
    print(text, end="")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text)
    found = findings_file.read(results.under(root, results.FINDINGS_DATA))
    if found is not None:
        print(f"\nsplitbench found (the whole text: {results.under(root, results.FINDINGS)}; "
              f"the page: {results.under(root, results.REPORT)}):")
        print("\n".join(f"  {line}" for line in findings_file.headlines(found)))
    return [*toolchain_failures(toolchains), *link_failures(links), *load_failures(summary)]
