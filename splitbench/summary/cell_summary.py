"""One row per cell from its request files: medians over ok requests, their
uncertainty, the cell's status and flags, and what else ran on the hosts meanwhile.

The summary (`results/summary/cells.parquet`) is what every table and chart reads; it
is built from request rows only (one per request), and from token rows only for the
standard error of the decode step.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from splitbench.backends import metrics
from splitbench.contracts import results
from splitbench.contracts.slices import InterferenceLimits
from splitbench.infra import interference, intervals
from splitbench.summary import paired, releases, upgrade

SUMMARY_KEYS = results.CELL_KEYS


FIGURES = ["prefill_tps", "decode_tps", "decode_ms_per_token", "ttft_ms",
           "server_prefill_tps", "server_decode_ms_per_token", "prompt_tokens",
           "rpc_bytes_per_token_a_to_b", "rpc_bytes_per_token_b_to_a", "server_ttft_ms",
           "generated_tokens", "rpc_turns_per_token", "rpc_turn_wait_us"]


LAYOUT = ["model_n_embd", "model_n_vocab", "blocks_on_b", "output_on_b", "rpc_workers",
          "backend", "split", "model_shape"]


# What else used each host's CPUs during a cell (interference.Meter, the sampler).
CPU_FIGURES = interference.COLUMNS


# The client's decode against the server's own, per request (metrics.request_row).
WITNESS_COLUMNS = ["decode_vs_server", "first_token_late_ms", "last_token_late_ms"]


# What the summary reads of a request file; older files lack some (those stay missing).
SUMMARY_COLUMNS = ["request_id", "status", "cell_status", "generated_tokens", "n_predict",
                   "t_send_ns", "t_last_ns", "decode_ms_se", "cell_wall_ms",
                   "cell_throughput_tps", "launch_id", "link_fingerprint", "temp_before_c",
                   "temp_after_c", "temp_peak_c", "repeat", "shot", "release_wall_ms",
                   "release_throughput_tps", "arrival_clock", "stopped",
                   "coalesced_tokens", "reference", "round", "rr64_us", "error_text",
                   "wakeup_latency_a", "wakeup_latency_b", *WITNESS_COLUMNS,
                   *CPU_FIGURES, *FIGURES, *LAYOUT]


def summarize(request_files: list[str], contexts: dict[str, int],
              interference_limits: InterferenceLimits | None = None) -> pd.DataFrame:
    """One row per cell: medians over its ok requests, status, uncertainty, overlap,
    telemetry, and what flags it (interference above `interference_limits`, tokens
    that share a timestamp)."""
    every = read_requests(request_files, SUMMARY_COLUMNS)
    # A paired cell's rows include the baseline link measured alongside (its reference):
    # those give the paired differences only, never the cell's own figures.
    reference = every["reference"].fillna(False).astype(bool) if "reference" in every \
        else pd.Series(False, index=every.index)
    requests = every[~reference]
    ok = requests[requests["status"] == "ok"]
    medians = ok.groupby(SUMMARY_KEYS)[[f for f in FIGURES if f in ok.columns]].median()
    summary = _cells(requests).join(medians).join(_uncertainty(ok)).join(
        paired.paired_deltas(every)).reset_index()
    summary["ctx_tokens"] = summary["ctx"].map(contexts)
    summary["temps"] = summary.apply(_temps_text, axis=1)
    summary = releases.with_releases(summary, requests)
    summary = summary.join(interference.flag(summary, interference_limits or {}))
    summary["timing"] = [joined(t, w) for t, w in zip(
        _timing_flags(summary), _witness_flags(summary, ok), strict=True)]
    summary["flags"] = [joined(i, t, m) for i, t, m in zip(
        summary["interference"], summary["timing"], summary["interference_missing"],
        strict=True)]
    return ctx_sorted(summary, SUMMARY_KEYS, by_length(contexts)).reset_index(drop=True)


def _timing_flags(summary: pd.DataFrame) -> list[str | None]:
    """Cells whose token times are not each token's own: tokens that came out of one
    read without a packet clock share that read's stamp."""
    out = []
    for row in summary.itertuples(index=False):
        shared = getattr(row, "coalesced_tokens", None)
        clock = getattr(row, "arrival_clock", None)
        if shared and shared > 0 and clock != "segment":
            out.append(f"{shared:.0f} tokens share a timestamp ({clock} clock: the "
                       "client read them together)")
        else:
            out.append(None)
    return out


def _witness_flags(summary: pd.DataFrame, ok: pd.DataFrame) -> list[str | None]:
    """Cells whose client and server disagree on decode beyond metrics.WITNESS_BOUND.

    A cell's figures are medians over its requests, and a cell is held to its median
    request's disagreement, unless it is a single stream whose tokens were stamped when
    the client read them (no packet clock): then one request the client read late has
    token times that are not the tokens' own, and its worst request flags it. With the
    packet clock every token is stamped as its segment arrived, so a request whose
    token reached host A late was sent late: the server's own delay, which its timer
    does not count and a user does see (under concurrency, another slot's prefill;
    alone, the send after a long prefill, 8 ms once in a quiet run), not the client's.
    The text names the request and which end of its decode window moved."""
    if "decode_vs_server" not in ok or ok["decode_vs_server"].isna().all():
        return [None] * len(summary)
    texts = {}
    for key, cell in ok.dropna(subset=["decode_vs_server"]).groupby(SUMMARY_KEYS):
        gaps = cell["decode_vs_server"]
        clocks = set(cell["arrival_clock"].dropna()) if "arrival_clock" in cell else set()
        alone = key[SUMMARY_KEYS.index("conc")] == 1
        if alone and clocks != {"segment"}:
            worst = cell.loc[gaps.abs().idxmax()]
            if abs(worst["decode_vs_server"]) > metrics.WITNESS_BOUND:
                texts[key] = (f"client and server disagree on decode: request "
                              f"{worst['request_id']:.0f} {worst['decode_vs_server']:+.1%} "
                              f"against the server's own{_late_end(worst)}")
        elif abs(gaps.median()) > metrics.WITNESS_BOUND:
            texts[key] = (f"client and server disagree on decode: the median request "
                          f"{gaps.median():+.1%} against the server's own")
    return [texts.get(tuple(row)) for row in summary[SUMMARY_KEYS].itertuples(index=False)]


def _late_end(request: pd.Series) -> str:
    """Which end of a request's decode window reached the client late, if one did."""
    ends = [(request.get(f"{end}_token_late_ms"), end) for end in ("first", "last")]
    late = [(ms, end) for ms, end in ends if isinstance(ms, float) and ms >= 0.5]
    if not late:
        return ""
    ms, end = max(late)
    return f" (its {end} token reached the client {ms:.1f} ms later than the others)"


def joined(*reasons: Any) -> str | None:
    """The reasons that are text, joined with "; " (None when there is none)."""
    parts = [r for r in reasons if isinstance(r, str) and r]
    return "; ".join(parts) or None


def by_length(contexts: dict[str, int]) -> list[str]:
    """Context labels from shortest to longest prompt."""
    return sorted(contexts, key=contexts.get)


def read_requests(request_files: Sequence[str],
                  columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Every cell's request rows in one frame, each with its identity (pair, link, model,
    ctx, conc, repeat). A file written in an older results format is brought up to the
    current one as it is read (summary/upgrade.py).

    columns: the request columns to read (all where None) where a file has them; a file
    lacking one gets it missing. pyarrow reads each file, the tables are concatenated
    and converted to pandas once.
    """
    needs_se = columns is None or "decode_ms_se" in columns
    wanted = None if columns is None else {*columns, "request_id", *results.IDENTITY}
    pieces, old = [], []
    for path in request_files:
        try:
            found = os.stat(path)
            whole = _request_table(str(path), found.st_mtime_ns, found.st_size)
        except (pa.ArrowException, OSError) as exc:
            pieces.append(upgrade.with_identity(_unreadable(path, exc), path))
            continue
        names = whole.column_names
        table = whole if wanted is None else whole.select([c for c in names if c in wanted])
        if needs_se and upgrade.lacks_dispersion(table):
            old.append(len(pieces))
        pieces.append(upgrade.with_identity(table, path))
    if not pieces:
        raise ValueError("no request files")
    frame = pa.concat_tables(pieces, promote_options="permissive").to_pandas()
    if old:
        file_of = np.repeat(np.arange(len(pieces)), [t.num_rows for t in pieces])
        upgrade.fill_dispersion(frame, file_of, [request_files[i] for i in old], old)
    return frame


# The summary, the percentiles, the tail's shift and the service levels each read a
# cell's requests: each file is read once per process, keyed by its stamp (a request
# file is a few rows).
@functools.lru_cache(maxsize=8192)
def _request_table(path: str, _mtime_ns: int, _size: int) -> pa.Table:
    return pq.read_table(path, use_threads=False).replace_schema_metadata(None)


def _unreadable(path: str, exc: Exception) -> pa.Table:
    """A cell whose request file cannot be read (a disk fault, a file cut short): one
    failed request that says so, so the cell is a result in the tables and every other
    cell is still summarized."""
    return pa.table({"request_id": pa.array([-1], pa.int64()), "status": ["error"],
                     "cell_status": ["error"],
                     "error_type": ["unreadable"],
                     "error_text": [f"its request file cannot be read: {exc}"[:500]],
                     "reference": [False]})


# Cell-level fields: name, request column, how one repeat's rows give it, how the
# repeats of a cell combine. Every request row of a repeat carries the same cell fields.
CELL_FIELDS = [
    ("status", "cell_status", "first", lambda s: metrics.cell_status(list(s))),
    ("repeats", "cell_status", "first", "size"),
    ("requests", "request_id", "count", "sum"),
    ("ok_requests", "ok", "sum", "sum"),
    ("wall_ms", "cell_wall_ms", "first", "median"),
    ("server_launch_id", "launch_id", "first", "first"),
    ("link_fingerprint", "link_fingerprint", "first", "first"),
    ("temp_before_c", "temp_before_c", "first", "first"),
    ("temp_after_c", "temp_after_c", "first", "last"),
    # Fields that cells measured before they existed lack.
    ("throughput_tps", "cell_throughput_tps", "first", "median"),
    # Why the cell's requests stopped (cell.precision): the last repeat's.
    ("stopped", "stopped", "first", "last"),
    ("temp_peak_c", "temp_peak_c", "first", "max"),
    # Token clocks: the cell's tokens that share a timestamp, and the clock(s) used.
    ("coalesced_tokens", "coalesced_tokens", "sum", "sum"),
    ("arrival_clock", "arrival_clock", lambda s: _one_clock(s), lambda s: _one_clock(s)),
    # Interference: the worst repeat (interference.across).
    *[(name, name, "first", interference.across(name)
       if name.endswith(("_pct", "_cores")) or name.startswith("foreign_top") else "first")
      for name in CPU_FIGURES],
    # Why the cell failed, where it did: its first request's error (a launch's reason).
    ("error", "error_text", "first", "first"),
    ("wakeup_latency_a", "wakeup_latency_a", "first", "first"),
    ("wakeup_latency_b", "wakeup_latency_b", "first", "first"),
    # What decides a token's bytes across the link (cells.layout).
    *[(name, name, "first", "first") for name in LAYOUT],
]


def _one_clock(clocks: pd.Series) -> str | None:
    """One word for the clocks of several requests or repeats ("mixed" when they differ)."""
    found = set(clocks.dropna())
    return found.pop() if len(found) == 1 else ("mixed" if found else None)


def _cells(requests: pd.DataFrame) -> pd.DataFrame:
    """Cell-level fields; with repeats, the worst status and the median wall time."""
    requests = requests.assign(ok=requests["status"].eq("ok"))
    fields = [f for f in CELL_FIELDS if f[1] in requests]
    runs = requests.groupby(SUMMARY_KEYS + ["repeat"]).agg(
        **{name: (column, per_run) for name, column, per_run, _ in fields})
    return runs.groupby(level=SUMMARY_KEYS).agg(
        **{name: (name, across) for name, _, _, across in fields})


def _uncertainty(ok: pd.DataFrame) -> pd.DataFrame:
    """Standard errors of a cell's decode ms/token, prefill tok/s and TTFT, and where
    they come from (`uncertainty_from`), best first:

    requests  a single-stream cell's sequential requests (and its repeats' requests):
              the spread of the requests, each a separate pass through the servers
    releases  a concurrent cell that released its N requests several times
              (cell.concurrent_releases, and every repeat's): the spread of the
              releases' medians
    repeats   a concurrent cell measured several times, one release each (cells
              measured before a cell released more than once): the spread of the repeats
    tokens    one pass only: decode's per-token dispersion, which sees none of the
              variation from one request to the next, so it is a lower bound; prefill
              and TTFT then have none

    The figures are medians, so a spread becomes intervals.median_se's. Decode's
    per-token dispersion stays a floor: a few requests agreeing by chance must not
    claim more precision than their tokens support.
    """
    figures = ["decode_ms_per_token", "prefill_tps", "ttft_ms"]
    ok = ok.reindex(columns=list(dict.fromkeys([*ok.columns, *figures, "decode_ms_se"])))
    single = ok[ok["conc"] == 1]
    # Single stream: every ok request is a sample.
    by_request = single.groupby(SUMMARY_KEYS)
    n_req = by_request["decode_ms_per_token"].count()
    spread_req = intervals.group_median_se(by_request[figures])
    floor_req = by_request["decode_ms_se"].median() / np.sqrt(n_req.clip(lower=1))
    # Concurrent: the releases' medians are the samples (each repeat's releases; files
    # written before a cell released more than once have one per repeat).
    many = ok[ok["conc"] > 1]
    runs = many.assign(shot=releases.shots(many)).groupby(SUMMARY_KEYS + ["repeat", "shot"])[
        [*figures, "decode_ms_se"]].median()
    by_run = runs.groupby(level=SUMMARY_KEYS)
    n_run = by_run["decode_ms_per_token"].count()
    spread_run = intervals.group_median_se(by_run[figures])
    floor_run = by_run["decode_ms_se"].median() / np.sqrt(n_run.clip(lower=1))
    repeats = runs.reset_index("shot").groupby(level=SUMMARY_KEYS + ["repeat"]).size() \
        .groupby(level=SUMMARY_KEYS).size()
    source_run = pd.Series(np.where(n_run > repeats.reindex(n_run.index), "releases",
                                    "repeats"), index=n_run.index, dtype=object)
    pieces = []
    # A concurrent request's gaps include the pauses while another slot's prompt is
    # processed: the concurrency itself, not noise in the release's median. Their
    # dispersion is no floor for the releases' figure (at 5k x 4 it was 20 times the
    # releases' own spread); it stands only where one release is all there is.
    for n, spread, floor, source, floored in (
            (n_req, spread_req, floor_req, "requests", True),
            (n_run, spread_run, floor_run, source_run, False)):
        several = n >= 2
        part = pd.DataFrame(index=n.index)
        spread_decode = np.fmax(spread["decode_ms_per_token"], floor) if floored \
            else spread["decode_ms_per_token"]
        part["decode_ms_se"] = np.where(several, spread_decode, floor)
        part["prefill_tps_se"] = spread["prefill_tps"].where(several)
        part["ttft_ms_se"] = spread["ttft_ms"].where(several)
        part["uncertainty_from"] = np.where(several, source,
                                            np.where(floor.notna(), "tokens", None))
        part["samples"] = n
        # Each figure's ± at its own sample size (a one-pass floor from its many tokens:
        # the normal quantile, and a lower bound the comparisons say so).
        dof = np.where(several, n - 1, intervals.UNBOUNDED)
        for figure in ("decode_ms", "prefill_tps", "ttft_ms"):
            part[f"{figure}_unc"] = intervals.halfwidth(part[f"{figure}_se"].to_numpy(float),
                                                        dof)
        pieces.append(part)
    return pd.concat(pieces)


def _temps_text(row: pd.Series) -> str | None:
    # No cell of the run measured (every one failed before it could): no temperatures.
    if pd.isna(row.get("temp_before_c")):
        return None
    return f"{row['temp_before_c']:.1f}->{row['temp_after_c']:.1f} C"


def read_links(link_files: list[str]) -> pd.DataFrame:
    """Link results, one row per (pair, link)."""
    if not link_files:
        return pd.DataFrame(columns=["pair", "link"])
    return pd.concat([pq.read_table(p).to_pandas() for p in link_files], ignore_index=True)


def link_flags(links: pd.DataFrame, interference_limits: InterferenceLimits | None,
               mark: str = "") -> list[str | None]:
    """Each link row's flags: its own (a negotiated speed below the expected one, ...)
    and, each after `mark`, interference above `interference_limits` while it was
    measured or interference that could not be read."""
    links = links.reindex(columns=list(dict.fromkeys([*links.columns, "flags"])))
    verdicts = interference.flag(links, interference_limits or {})[
        ["interference", "interference_missing"]]
    return [joined(own, *(f"{mark}{x}" for x in (i, m) if isinstance(x, str)))
            for own, (i, m) in zip(links["flags"], verdicts.itertuples(index=False),
                                   strict=True)]


def latency_column(links: pd.DataFrame) -> str:
    """The request-response figure that decode's per-token cost is compared with.

    rr_fixed_us, the zero-payload intercept of the probe's payload sweep: a decode step
    moves one token's activations (a few KB) per transaction, where the fixed per-
    transaction overhead dominates (the seed: 326 of 856 us at 16 KB on fake TB5, wire
    time only 7%). rr16k_p50_us adds 16 KB of wire time per transaction that decode does
    not pay and that differs between links by bandwidth, not latency. It is the fallback
    where no link has a sweep fit.
    """
    if "rr_fixed_us" in links and links["rr_fixed_us"].notna().any():
        return "rr_fixed_us"
    return "rr16k_p50_us"


def latency_by_pair(links: pd.DataFrame) -> pd.DataFrame:
    """Each link's latency figure (µs) as its own pair's links choose it
    (`latency_column` over that pair's links only): pair, link, latency_us and
    latency_from (the column). One pair's links without a sweep fit keep their 16 KB
    figure when another pair's links have a fit; a link is only ever set against the
    links of its own pair, measured the same way."""
    rows = []
    if not links.empty and "pair" in links:
        for _, group in links.groupby("pair", sort=False):
            column = latency_column(group)
            values = pd.to_numeric(group[column], errors="coerce") if column in group \
                else pd.Series(np.nan, index=group.index)
            rows.append(pd.DataFrame({"pair": group["pair"], "link": group["link"],
                                      "latency_us": values, "latency_from": column}))
    if not rows:
        return pd.DataFrame({"pair": pd.Series(dtype=object), "link": pd.Series(dtype=object),
                             "latency_us": pd.Series(dtype=float),
                             "latency_from": pd.Series(dtype=object)})
    return pd.concat(rows, ignore_index=True)


def rounded(value: float | None, digits: int) -> float | None:
    """value rounded for a table; None when missing or not finite."""
    if value is None or not np.isfinite(value):
        return None
    return round(float(value), digits)


def ctx_sorted(frame: pd.DataFrame, keys: list[str], contexts: Sequence[str]) -> pd.DataFrame:
    order = {label: i for i, label in enumerate(contexts)}
    return frame.sort_values(
        keys, key=lambda col: col.map(order) if col.name == "ctx" else col, kind="stable")


def pick_baseline(summary: pd.DataFrame, baseline_link: str | None = None) -> str | None:
    """The configured baseline; else the link named "baseline"; else the first link."""
    if baseline_link:
        return baseline_link
    links = sorted(summary["link"].dropna().unique())
    if "baseline" in links:
        return "baseline"
    return links[0] if links else None
