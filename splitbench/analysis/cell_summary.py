"""One row per cell from its request files: medians over ok requests, their
uncertainty, the cell's status and flags, and what else ran on the hosts meanwhile.

The summary (`results/summary/cells.parquet`) is what every table and chart reads; it
is built from request rows only (one per request), and from token rows only for the
standard error of the decode step.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from splitbench import results
from splitbench.analysis import comparison
from splitbench.analysis.comparison import COVERAGE, MEDIAN_SE
from splitbench.backends import metrics
from splitbench.infra import interference

SUMMARY_KEYS = ["pair", "link", "model", "ctx", "conc"]


FIGURES = ["prefill_tps", "decode_tps", "decode_ms_per_token", "ttft_ms",
           "server_prefill_tps", "server_decode_ms_per_token", "prompt_tokens",
           "rpc_bytes_per_token_a_to_b", "rpc_bytes_per_token_b_to_a", "server_ttft_ms",
           "generated_tokens"]


LAYOUT = ["model_n_embd", "model_n_vocab", "blocks_on_b", "output_on_b", "rpc_workers",
          "backend", "split", "model_shape"]


# What else used each host's CPUs during a cell (interference.Meter, the sampler).
CPU_FIGURES = interference.COLUMNS


# What the summary reads of a request file; older files lack some (those stay missing).
SUMMARY_COLUMNS = ["request_id", "status", "cell_status", "generated_tokens", "n_predict",
                   "t_send_ns", "t_last_ns", "decode_ms_se", "cell_wall_ms",
                   "cell_throughput_tps", "launch_id", "link_fingerprint", "temp_before_c",
                   "temp_after_c", "temp_peak_c", "repeat", "shot", "release_wall_ms",
                   "release_throughput_tps", "arrival_clock",
                   "coalesced_tokens", "reference", "round", "rr64_us", "error_text",
                   "wakeup_latency_a",
                   "wakeup_latency_b", *CPU_FIGURES, *FIGURES, *LAYOUT]


# Overlap above this is flagged where it has no ± (one release): N requests cannot
# finish sooner than one alone (1.0); the margin is T1's own spread between sequential
# requests. With a ± the flag is "above 1 beyond its ±" (report.tables).
OVERLAP_MAX = 1.05


def summarize(request_files: list[str], contexts: dict[str, int],
              interference_limits: dict[str, Any] | None = None) -> pd.DataFrame:
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
        comparison.paired_deltas(every)).reset_index()
    summary["ctx_tokens"] = summary["ctx"].map(contexts)
    summary["temps"] = summary.apply(_temps_text, axis=1)
    summary = _with_releases(summary, requests)
    summary = summary.join(interference.flag(summary, interference_limits or {}))
    summary["timing"] = _timing_flags(summary)
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
    ctx, conc, repeat): the rows' own, or, for files written before rows carried it, the
    file's path's (`results.identity`).

    columns: the request columns to read (all where None) where a file has them; a file
    lacking one gets it missing. pyarrow reads each file, the tables are concatenated
    and converted to pandas once. When `decode_ms_se` is wanted, files measured before
    requests carried their own dispersion (none, or none filled in) get it from their
    token files, read together (`_token_se`), as metrics.request_row computes it.
    """
    needs_se = columns is None or "decode_ms_se" in columns
    wanted = None if columns is None else {*columns, "request_id", *results.IDENTITY}
    pieces, old = [], []
    for path in request_files:
        try:
            file = pq.ParquetFile(path)
            names = file.schema_arrow.names
            table = file.read(columns=None if wanted is None else
                              [c for c in names if c in wanted],
                              use_threads=False).replace_schema_metadata(None)
        except (pa.ArrowException, OSError) as exc:
            pieces.append(_with_identity(_unreadable(path, exc), path))
            continue
        if needs_se and ("decode_ms_se" not in names or _all_missing(table["decode_ms_se"])):
            old.append(len(pieces))
        pieces.append(_with_identity(table, path))
    if not pieces:
        raise ValueError("no request files")
    frame = pa.concat_tables(pieces, promote_options="permissive").to_pandas()
    file_of = np.repeat(np.arange(len(pieces)), [t.num_rows for t in pieces])
    if old:
        token_files = [Path(request_files[i]).with_name(
            Path(request_files[i]).name.replace(".requests", "")) for i in old]
        se = _token_se(token_files)
        rows = np.isin(file_of, old)
        values = (frame["decode_ms_se"].to_numpy(dtype="float64", na_value=np.nan, copy=True)
                  if "decode_ms_se" in frame else np.full(len(frame), np.nan))
        at = pd.MultiIndex.from_arrays(
            [np.searchsorted(old, file_of[rows]), frame["request_id"].to_numpy()[rows]])
        values[rows] = se.reindex(at).to_numpy() if len(se) else np.nan
        frame["decode_ms_se"] = values
    return frame


def _unreadable(path: str, exc: Exception) -> pa.Table:
    """A cell whose request file cannot be read (a disk fault, a file cut short): one
    failed request that says so, so the cell is a result in the tables and every other
    cell is still summarized."""
    return pa.table({"request_id": pa.array([-1], pa.int64()), "status": ["error"],
                     "cell_status": ["error"],
                     "error_type": ["unreadable"],
                     "error_text": [f"its request file cannot be read: {exc}"[:500]],
                     "reference": [False]})


def _with_identity(table: pa.Table, path: str) -> pa.Table:
    """A request file's rows with their identity columns; files written before rows
    carried them get them from their path (the results layout's own parser)."""
    added = results.missing_identity(table.column_names, path, results.IDENTITY)
    for key, value in added.items():
        kind = pa.int64() if key in ("conc", "repeat") else pa.string()
        table = table.append_column(key, pa.array([value] * table.num_rows, type=kind))
    return table


def _all_missing(column: pa.ChunkedArray) -> bool:
    return len(column) == 0 or bool(pc.all(pc.is_null(column, nan_is_null=True)).as_py())


def _token_se(token_files: Sequence[Path]) -> pd.Series:
    """Standard error of each request's mean inter-token gap (ms), by (position in
    token_files, request_id); nothing for files that do not exist."""
    pieces = []
    for i, path in enumerate(token_files):
        if path.exists():
            table = pq.ParquetFile(path).read(columns=["request_id", "token_index", "t_ns"],
                                              use_threads=False)
            pieces.append(table.replace_schema_metadata(None).append_column(
                "file", pa.array(np.full(table.num_rows, i))))
    if not pieces:
        return pd.Series(dtype="float64")
    tokens = pa.concat_tables(pieces, promote_options="permissive").to_pandas()
    tokens = tokens.sort_values(["file", "request_id", "token_index"])
    by = [tokens["file"], tokens["request_id"]]
    gaps = tokens.groupby(by)["t_ns"].diff().div(1e6).groupby(by)
    count = gaps.count()
    return (gaps.std(ddof=1) / np.sqrt(count)).where(count >= 2)


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
    ("temp_peak_c", "temp_peak_c", "first", "max"),
    # Token clocks: the cell's tokens that share a timestamp, and the clock(s) used.
    ("coalesced_tokens", "coalesced_tokens", "sum", "sum"),
    ("arrival_clock", "arrival_clock", lambda s: _one_clock(s), lambda s: _one_clock(s)),
    # Interference: the worst repeat (interference.across).
    *[(name, name, "first", interference.across(name) if name.endswith(("_pct", "_cores"))
       else "first")
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

    The figures are medians, so a spread becomes MEDIAN_SE * sd / sqrt(n). Decode's
    per-token dispersion stays a floor: a few requests agreeing by chance must not
    claim more precision than their tokens support.
    """
    figures = ["decode_ms_per_token", "prefill_tps", "ttft_ms"]
    ok = ok.reindex(columns=list(dict.fromkeys([*ok.columns, *figures, "decode_ms_se"])))
    single = ok[ok["conc"] == 1]
    # Single stream: every ok request is a sample.
    by_request = single.groupby(SUMMARY_KEYS)
    n_req = by_request["decode_ms_per_token"].count()
    spread_req = by_request[figures].std(ddof=1).mul(MEDIAN_SE).div(np.sqrt(n_req), axis=0)
    floor_req = by_request["decode_ms_se"].median() / np.sqrt(n_req.clip(lower=1))
    # Concurrent: the releases' medians are the samples (each repeat's releases; files
    # written before a cell released more than once have one per repeat).
    many = ok[ok["conc"] > 1]
    runs = many.assign(shot=_shots(many)).groupby(SUMMARY_KEYS + ["repeat", "shot"])[
        [*figures, "decode_ms_se"]].median()
    by_run = runs.groupby(level=SUMMARY_KEYS)
    n_run = by_run["decode_ms_per_token"].count()
    spread_run = by_run[figures].std(ddof=1).mul(MEDIAN_SE).div(np.sqrt(n_run), axis=0)
    floor_run = by_run["decode_ms_se"].median() / np.sqrt(n_run.clip(lower=1))
    repeats = runs.reset_index("shot").groupby(level=SUMMARY_KEYS + ["repeat"]).size() \
        .groupby(level=SUMMARY_KEYS).size()
    source_run = pd.Series(np.where(n_run > repeats.reindex(n_run.index), "releases",
                                    "repeats"), index=n_run.index, dtype=object)
    pieces = []
    for n, spread, floor, source in ((n_req, spread_req, floor_req, "requests"),
                                     (n_run, spread_run, floor_run, source_run)):
        several = n >= 2
        part = pd.DataFrame(index=n.index)
        part["decode_ms_se"] = np.where(several, np.fmax(spread["decode_ms_per_token"], floor),
                                        floor)
        part["prefill_tps_se"] = spread["prefill_tps"].where(several)
        part["ttft_ms_se"] = spread["ttft_ms"].where(several)
        part["uncertainty_from"] = np.where(several, source,
                                            np.where(floor.notna(), "tokens", None))
        part["samples"] = n
        pieces.append(part)
    return pd.concat(pieces)


def _shots(requests: pd.DataFrame) -> pd.Series:
    """Each request's release within its repeat (`shot`); 0 for rows written before
    requests carried it (one release per repeat then)."""
    if "shot" not in requests:
        return pd.Series(0, index=requests.index)
    return requests["shot"].fillna(0).astype("int64")


def _temps_text(row: pd.Series) -> str | None:
    if pd.isna(row["temp_before_c"]):
        return None
    return f"{row['temp_before_c']:.1f}->{row['temp_after_c']:.1f} C"


# The release figures a concurrent cell's summary row takes from its releases.
RELEASE_COLUMNS = ["releases", "overlap", "overlap_se", "overlap_unc",
                   "overlap_unc_lower_bound", "throughput_tps_se", "throughput_tps_unc",
                   "prefill_share"]


def _with_releases(summary: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """The summary with what a concurrent cell's releases give: its overlap, wall time and
    throughput, each the median over its releases (every repeat's), the standard error
    of overlap and throughput from their spread over the releases (`*_se`; `*_unc`:
    COVERAGE standard errors, NaN with fewer than two releases), the number of
    releases, and at every cell the single stream's prefill share (`prefill_share`:
    its median TTFT over its median request time, T1, at the same pair, link, model and
    context).

    A release's overlap is `metrics.overlap` of its own wall time against T1; releases
    with a missing or cut-short request have none (those classed `crash` only because
    decode fell below cell.crash_below_tps streamed every token: their wall time is real,
    and the seed reports their overlap, -0.2 at 100K x 4). Overlap's standard error adds
    T1's own (the spread of the single stream's requests), which moves every release's
    overlap together, in quadrature to the releases' spread. A cell of one release has
    no spread of its own: its ± is T1's part alone, a lower bound
    (`overlap_unc_lower_bound`), so that its figure still says how far it can be trusted
    at least.
    """
    singles = _single_streams(requests)
    table = releases(requests)
    out = summary.drop(columns=[c for c in RELEASE_COLUMNS if c in summary])
    at = pd.MultiIndex.from_frame(out[["pair", "link", "model", "ctx"]])
    out["prefill_share"] = singles["prefill_share"].reindex(at).to_numpy()
    if table.empty:
        for column in RELEASE_COLUMNS[:-1]:
            out[column] = np.nan
        return out
    table = table.join(singles[["t1_ms", "t1_se"]], on=["pair", "link", "model", "ctx"])
    table["overlap"] = [metrics.overlap(n, t1, wall) if whole and pd.notna(t1) else None
                        for n, t1, wall, whole in zip(
                            table["streams"], table["t1_ms"], table["wall_ms"],
                            table["complete"], strict=True)]
    table["overlap"] = pd.to_numeric(table["overlap"], errors="coerce")
    by_cell = table.groupby(SUMMARY_KEYS)
    cells = pd.DataFrame({
        "releases": by_cell.size(),
        "wall_ms": by_cell["wall_ms"].median(),
        "throughput_tps": by_cell["throughput_tps"].median(),
        "throughput_tps_se": _median_se(by_cell["throughput_tps"]),
        "overlap": by_cell["overlap"].median(),
        "release_se": _median_se(by_cell["overlap"]),
        "t1_ms": by_cell["t1_ms"].first(),
        "t1_se": by_cell["t1_se"].first(),
    })
    # d overlap / d T1 = W / ((N - 1) T1^2): T1's error moves every release alike.
    conc = cells.index.get_level_values("conc").to_numpy()
    t1_term = cells["wall_ms"] / ((conc - 1) * cells["t1_ms"] ** 2) * cells["t1_se"]
    one = cells["release_se"].isna() & (t1_term > 0) & cells["overlap"].notna()
    cells["overlap_se"] = np.hypot(cells["release_se"], t1_term.fillna(0.0)).where(
        ~one, t1_term)
    cells["overlap_unc"] = COVERAGE * cells["overlap_se"]
    cells["overlap_unc_lower_bound"] = one.where(cells["overlap_se"].notna())
    cells["throughput_tps_unc"] = COVERAGE * cells["throughput_tps_se"]
    keyed = out.set_index(SUMMARY_KEYS)
    for column in ("releases", "overlap", "overlap_se", "overlap_unc",
                   "overlap_unc_lower_bound", "throughput_tps_se", "throughput_tps_unc"):
        keyed[column] = cells[column].reindex(keyed.index)
    # A concurrent cell's wall time and throughput are its releases' (not the span of
    # them all); a single stream keeps its cell-wide figures.
    for column in ("wall_ms", "throughput_tps"):
        mine = cells[column].reindex(keyed.index)
        if column in keyed:
            keyed[column] = mine.where(mine.notna(), keyed[column])
        else:
            keyed[column] = mine
    return keyed.reset_index()


# An overlap below 0 beyond its ± is flagged only where the single stream's prefill is
# under this share of its request time: there decode dominates, and N streams that take
# longer than N in a row point at a fault or noise. Where prefill dominates, requests
# queue for the same compute and worse than serial is a real result (the seed: -0.2 at
# 100K x 4).
PREFILL_SHARE_MAX = 0.25


def overlap_flag(value: Any, unc: Any, prefill_share: Any) -> str | None:
    """Why an overlap is impossible (the tables' ⚠), or None: above 1 beyond its ± (N
    requests cannot finish sooner than one alone), below 0 beyond its ± where prefill is
    under PREFILL_SHARE_MAX of a single request; without a ± (one release), above
    OVERLAP_MAX."""
    def finite(x: Any) -> bool:
        return x is not None and not pd.isna(x) and bool(np.isfinite(x))

    if not finite(value):
        return None
    if not finite(unc):
        return (f"{value:.2f} is above {OVERLAP_MAX:g}: more than fully concurrent"
                if value > OVERLAP_MAX else None)
    if value - unc > 1:
        return f"{value:.2f} ±{unc:.2f} is above 1 beyond its ±: more than fully concurrent"
    if value + unc < 0 and finite(prefill_share) and prefill_share < PREFILL_SHARE_MAX:
        return (f"{value:.2f} ±{unc:.2f} is below 0 beyond its ± where prefill is "
                f"{prefill_share:.0%} of a single request (under {PREFILL_SHARE_MAX:.0%}): "
                "worse than serial where the streams should overlap")
    return None


# The range an overlap lies in when nothing needs saying: 0 (serial) to 1 (fully
# concurrent), widened by the margin OVERLAP_MAX allows above 1, on both sides.
OVERLAP_MIN = 1 - OVERLAP_MAX


def overlap_outside(value: Any, unc: Any, prefill_share: Any) -> str | None:
    """Why an overlap outside [OVERLAP_MIN, OVERLAP_MAX] that `overlap_flag` does not
    flag is no fault (the tables' ‡), or None where it lies inside or is flagged."""
    def finite(x: Any) -> bool:
        return x is not None and not pd.isna(x) and bool(np.isfinite(x))

    if not finite(value) or OVERLAP_MIN <= value <= OVERLAP_MAX \
            or overlap_flag(value, unc, prefill_share):
        return None
    if not finite(unc):
        return f"{value:.2f} has no ± (no spread known), so it is not shown to be below 0"
    if value < 0 and value + unc >= 0:
        return f"{value:.2f} ±{unc:.2f} lies within its ± of 0 (serial)"
    if value > 1:
        return f"{value:.2f} ±{unc:.2f} lies within its ± of 1 (fully concurrent)"
    share = f"{prefill_share:.0%}" if finite(prefill_share) else "an unknown share"
    return (f"{value:.2f} ±{unc:.2f} is worse than serial where prefill is {share} of a "
            "single request: the requests queue for the same compute")


def _median_se(values: Any) -> pd.Series:
    """Standard error of the median of each group's values (MEDIAN_SE sd / sqrt(n)), NaN
    with fewer than two."""
    n = values.count()
    return (values.std(ddof=1) * MEDIAN_SE / np.sqrt(n)).where(n >= 2)


def releases(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per release of every concurrent cell (index: SUMMARY_KEYS, repeat, shot):
    its wall time (first send to last token of its N requests), throughput (their tokens
    over it) and whether every request streamed all its tokens (`complete`). Rows
    written before requests carried their release's figures (`release_wall_ms`) had one
    release per repeat: the cell's own figures are that release's."""
    many = requests[(requests["conc"] > 1)
                    & ~requests.get("reference", pd.Series(False, index=requests.index))
                    .fillna(False).astype(bool)]
    keys = [*SUMMARY_KEYS, "repeat", "shot"]
    if many.empty:
        return pd.DataFrame(columns=["wall_ms", "throughput_tps", "complete"],
                            index=pd.MultiIndex.from_tuples([], names=keys))
    if {"generated_tokens", "n_predict"} <= set(many.columns):
        whole = many["generated_tokens"] >= many["n_predict"]
    else:
        whole = many["status"] == "ok"
    many = many.reindex(columns=list(dict.fromkeys([
        *many.columns, "release_wall_ms", "release_throughput_tps", "cell_wall_ms",
        "cell_throughput_tps"]))).assign(shot=_shots(many), whole=whole)
    numbers = ["release_wall_ms", "release_throughput_tps", "cell_wall_ms",
               "cell_throughput_tps"]
    many[numbers] = many[numbers].apply(pd.to_numeric, errors="coerce")
    table = many.groupby(keys).agg(
        wall_ms=("release_wall_ms", "first"), throughput_tps=("release_throughput_tps", "first"),
        cell_wall_ms=("cell_wall_ms", "first"),
        cell_throughput_tps=("cell_throughput_tps", "first"), complete=("whole", "all"))
    alone = table.groupby(level=[*SUMMARY_KEYS, "repeat"])["complete"].transform("size") == 1
    for column in ("wall_ms", "throughput_tps"):
        table[column] = table[column].where(table[column].notna() | ~alone,
                                            table[f"cell_{column}"])
    table["streams"] = table.index.get_level_values("conc")
    return table.drop(columns=["cell_wall_ms", "cell_throughput_tps"])


def _single_streams(requests: pd.DataFrame) -> pd.DataFrame:
    """Per (pair, link, model, ctx): T1, the median wall time of the single stream's ok
    requests (ms), its standard error (`t1_se`, NaN with one request) and the share of
    it that is prefill (`prefill_share`: median TTFT / T1)."""
    singles = requests[(requests["conc"] == 1) & (requests["status"] == "ok")].assign(
        single_ms=lambda f: (f["t_last_ns"] - f["t_send_ns"]) / 1e6)
    if "ttft_ms" not in singles:
        singles = singles.assign(ttft_ms=np.nan)
    by = singles.groupby(["pair", "link", "model", "ctx"])
    out = pd.DataFrame({"t1_ms": by["single_ms"].median(),
                        "t1_se": _median_se(by["single_ms"]),
                        "ttft_ms": by["ttft_ms"].median()})
    out["prefill_share"] = out["ttft_ms"] / out["t1_ms"]
    return out


def read_links(link_files: list[str]) -> pd.DataFrame:
    """Link results, one row per (pair, link)."""
    if not link_files:
        return pd.DataFrame(columns=["pair", "link"])
    return pd.concat([pq.read_table(p).to_pandas() for p in link_files], ignore_index=True)


def link_flags(links: pd.DataFrame, interference_limits: dict[str, Any] | None,
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
