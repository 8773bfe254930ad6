"""From cell Parquet to the summary and the tables a person reads.

`summarize` makes one row per cell from the request files. Each table function takes that
summary (and, for the mechanisms, the link results) and returns a DataFrame that
`write_table` renders as Markdown and CSV; `aggregate` writes them all. Tables are built
from summary rows only (one per cell), so nothing here loops over token rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from splitbench.analysis import comparison, traffic
from splitbench.analysis.fits import fit_through_origin
from splitbench.backends.llamacpp import metrics
from splitbench.infra import archive, interference, parquet_io

SUMMARY_KEYS = ["pair", "link", "model", "ctx", "conc"]
# Cells that a link comparison sets side by side: same pair, model and context.
COMPARE_KEYS = ["pair", "model", "ctx"]
FIGURES = ["prefill_tps", "decode_tps", "decode_ms_per_token", "ttft_ms",
           "server_prefill_tps", "server_decode_ms_per_token", "prompt_tokens",
           "rpc_bytes_per_token_a_to_b", "rpc_bytes_per_token_b_to_a", "server_ttft_ms"]
# Every table `aggregate` writes (results/tables/<stem>.md and .csv): the aggregate
# rule declares exactly these as its outputs.
TABLE_STEMS = ["links", "link_comparison", "link_traffic", "single_stream_decode",
               "single_stream_prefill", "ttft", "concurrency_boundary", "overlap",
               "mechanisms", "remeasured"]
LAYOUT = ["model_n_embd", "model_n_vocab", "blocks_on_b", "output_on_b", "rpc_workers"]
# What else used each host's CPUs during a cell (interference.Meter, the sampler).
CPU_FIGURES = interference.COLUMNS
# What the summary reads of a request file; older files lack some (those stay missing).
SUMMARY_COLUMNS = ["request_id", "status", "cell_status", "generated_tokens", "n_predict",
                   "t_send_ns", "t_last_ns", "decode_ms_se", "cell_wall_ms",
                   "cell_throughput_tps", "launch_id", "link_fingerprint", "temp_before_c",
                   "temp_after_c", "temp_peak_c", "repeat", "arrival_clock",
                   "coalesced_tokens", "reference", "round", "rr64_us", "error_text",
                   "wakeup_latency_a",
                   "wakeup_latency_b", *CPU_FIGURES, *FIGURES, *LAYOUT]
# ctx{label}_c{N}.requests.parquet; a trailing _r{K} marks repeat K of the same cell, for
# when a cell is measured more than once (a `repeat` column in the rows wins over it).
CELL_FILE = re.compile(
    r"^ctx(?P<ctx>.+)_c(?P<conc>\d+)(?:_r(?P<repeat>\d+))?\.requests\.parquet$")
# "±" in the tables is COVERAGE standard errors (about a 95% interval); a difference
# inside it is "not resolvable".
COVERAGE = comparison.COVERAGE
MEDIAN_SE = comparison.MEDIAN_SE
# A measured link difference disagrees with its prediction beyond this many combined
# standard errors: a run checks several links and contexts, and at 2 one in twenty
# that agree would be flagged by chance.
AGREEMENT_SIGMAS = 3.0
# Marks a figure measured under interference or with tokens that share a timestamp,
# and figures no setup can give.
FLAG_MARK = "⚠"
# Overlap above this is flagged: N requests cannot finish sooner than one alone (1.0);
# the margin is T1's own spread between sequential requests.
OVERLAP_MAX = 1.05
# The seed's names for failure modes (its section 3): 400 is the context wall, 500 the
# overflow error.
FAILURE_LABEL = {"load": "load", "crash": "crash", "overflow": "500", "ctx_wall": "400",
                 "timeout": "timeout", "error": "error"}
FAILURE_AT = {"load": "does not load", "crash": "crashes", "overflow": "500",
              "ctx_wall": "400", "timeout": "times out", "error": "fails"}
# Prefill's elasticity to one-way bandwidth: within +-INSENSITIVE_BELOW prefill counts as
# insensitive to the link (the seed: +55% bandwidth bought +5..17% prefill, about 0.1 to
# 0.3); from TRACKS_ABOVE it tracks bandwidth.
INSENSITIVE_BELOW = 0.25
TRACKS_ABOVE = 0.75


# ---------------------------------------------------------------- summary


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
    summary["overlap"] = _overlaps(summary, requests)
    summary = summary.join(interference.flag(summary, interference_limits or {}))
    summary["timing"] = _timing_flags(summary)
    summary["flags"] = [joined(i, t, m) for i, t, m in zip(
        summary["interference"], summary["timing"], summary["interference_missing"],
        strict=True)]
    return _ctx_sorted(summary, SUMMARY_KEYS, by_length(contexts)).reset_index(drop=True)


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
    """Every cell's request rows in one frame, with the cell's pair, link, model, ctx and
    conc from its path, and `repeat` from the path where the rows carry none.

    columns: the request columns to read (all where None) where a file has them; a file
    lacking one gets it missing. pyarrow reads each file, the tables are concatenated
    and converted to pandas once. When `decode_ms_se` is wanted, files measured before
    requests carried their own dispersion (none, or none filled in) get it from their
    token files, read together (`_token_se`), as metrics.request_row computes it.
    """
    needs_se = columns is None or "decode_ms_se" in columns
    wanted = None if columns is None else {*columns, "request_id", "repeat"}
    pieces, cells, old = [], [], []
    for path in request_files:
        parts = Path(path).parts  # results/cells/PAIR/LINK/MODEL/ctxC_cN.requests.parquet
        name = CELL_FILE.match(Path(path).name)
        if name is None:
            raise ValueError(
                f"{path}: not a cell's request file (ctx<label>_c<N>.requests.parquet)")
        file = pq.ParquetFile(path)
        names = file.schema_arrow.names
        table = file.read(columns=None if wanted is None else [c for c in names if c in wanted],
                          use_threads=False).replace_schema_metadata(None)
        if needs_se and ("decode_ms_se" not in names or _all_missing(table["decode_ms_se"])):
            old.append(len(pieces))
        if "repeat" not in names:
            table = table.append_column(
                "repeat", pa.array(np.full(table.num_rows, int(name["repeat"] or 0))))
        pieces.append(table)
        cells.append((parts[-4], parts[-3], parts[-2], name["ctx"], int(name["conc"])))
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
    for key, values in zip(SUMMARY_KEYS, zip(*cells, strict=True), strict=True):
        frame[key] = np.asarray(values, dtype="int64" if key == "conc" else object)[file_of]
    return frame


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
    # Interference: the worst repeat.
    *[(name, name, "first", "max" if name.endswith(("_pct", "_cores")) else "first")
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
    repeats   a concurrent cell measured several times: the spread of the repeats
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
    # Concurrent: the repeats' medians are the samples.
    runs = ok[ok["conc"] > 1].groupby(SUMMARY_KEYS + ["repeat"])[
        [*figures, "decode_ms_se"]].median()
    by_run = runs.groupby(level=SUMMARY_KEYS)
    n_run = by_run["decode_ms_per_token"].count()
    spread_run = by_run[figures].std(ddof=1).mul(MEDIAN_SE).div(np.sqrt(n_run), axis=0)
    floor_run = by_run["decode_ms_se"].median() / np.sqrt(n_run.clip(lower=1))
    pieces = []
    for n, spread, floor, source in ((n_req, spread_req, floor_req, "requests"),
                                     (n_run, spread_run, floor_run, "repeats")):
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


def _temps_text(row: pd.Series) -> str | None:
    if pd.isna(row["temp_before_c"]):
        return None
    return f"{row['temp_before_c']:.1f}->{row['temp_after_c']:.1f} C"


def _overlaps(summary: pd.DataFrame, requests: pd.DataFrame) -> pd.Series:
    """Overlap of each N-way cell whose every request streamed all its tokens.

    That includes cells classed `crash` only because decode fell below
    cell.crash_below_tps: their wall time is real, and the seed reports their overlap
    (-0.2 at 100K x 4). Cells with a missing or cut-short request have no wall time to
    compare.
    """
    if {"generated_tokens", "n_predict"} <= set(requests.columns):
        whole = requests["generated_tokens"] >= requests["n_predict"]
    else:
        whole = requests["status"] == "ok"
    complete = whole.groupby([requests[k] for k in SUMMARY_KEYS]).all()
    singles = requests[(requests["conc"] == 1) & (requests["status"] == "ok")].assign(
        single_ms=lambda f: (f["t_last_ns"] - f["t_send_ns"]) / 1e6
    ).groupby(["pair", "link", "model", "ctx"])["single_ms"].median()
    values = []
    for row in summary.itertuples():
        single = singles.get((row.pair, row.link, row.model, row.ctx))
        usable = complete.get((row.pair, row.link, row.model, row.ctx, row.conc), False)
        values.append(metrics.overlap(row.conc, single, row.wall_ms) if usable else None)
    return pd.Series(values, index=summary.index, dtype="float64")


# ---------------------------------------------------------------- rendering helpers


def status_text(status: Any) -> str:
    """A failed cell as the seed writes it: "❌ 400", "❌ crash"; "—" for no cell."""
    if not isinstance(status, str):
        return "—"
    return f"❌ {FAILURE_LABEL.get(status, status)}"


def _cell_text(value: Any, status: Any, spec: str | Callable[[float], str]) -> str:
    """A figure where the cell is ok, its failure where it is not, "—" where missing."""
    if not isinstance(status, str):
        return "—"
    if status != "ok":
        return status_text(status)
    if value is None or not np.isfinite(value):
        return "—"
    return spec(value) if callable(spec) else format(value, spec)


def _row_keys(summary: pd.DataFrame) -> list[str]:
    """Row labels of per-link tables; the pair only where there are several."""
    return (["pair"] if summary["pair"].nunique() > 1 else []) + ["model", "link"]


def _ctx_sorted(frame: pd.DataFrame, keys: list[str], contexts: Sequence[str]) -> pd.DataFrame:
    order = {label: i for i, label in enumerate(contexts)}
    return frame.sort_values(
        keys, key=lambda col: col.map(order) if col.name == "ctx" else col, kind="stable")


def _by_context(summary: pd.DataFrame, contexts: Sequence[str], column: str,
                spec: str | Callable[[float], str]) -> pd.DataFrame:
    """Concurrency-1 cells as text, one row per model and link, one column per context."""
    one = summary[summary["conc"] == 1]
    keys = _row_keys(summary)
    flags = one["flags"] if "flags" in one else pd.Series(None, index=one.index)
    text = one.assign(text=[_flagged(_cell_text(v, s, spec), f) for v, s, f in
                            zip(one[column], one["status"], flags, strict=True)])
    table = text.pivot(index=keys, columns="ctx", values="text")
    return table.reindex(columns=[c for c in contexts if c in table.columns]).fillna("—")


def _flagged(text: str, flags: Any) -> str:
    """A cell's text with FLAG_MARK when it was measured under interference (or its
    tokens share timestamps): the reason is in the summary's `flags`."""
    return f"{text} {FLAG_MARK}" if isinstance(flags, str) and flags else text


def _ok_values(summary: pd.DataFrame, column: str, index: list[str]) -> pd.DataFrame:
    """Concurrency-1 figures of ok cells, wide by context (NaN elsewhere)."""
    one = summary[summary["conc"] == 1]
    return one.assign(value=one[column].where(one["status"] == "ok")).pivot(
        index=index, columns="ctx", values="value")


def _ms(value: float) -> str:
    return f"{value:.1f}" if abs(value) < 100 else f"{value:.0f}"


# ---------------------------------------------------------------- single stream


def single_stream_decode(summary: pd.DataFrame, contexts: list[str]) -> pd.DataFrame:
    """The seed's section 2: decode tok/s by context at concurrency 1, per model and link,
    with the longest/shortest retention column (the seed's 100K/Short)."""
    table = _by_context(summary, contexts, "decode_tps", ".1f")
    present = list(table.columns)
    if len(present) > 1:
        first, last = present[0], present[-1]
        values = _ok_values(summary, "decode_tps", _row_keys(summary)).reindex(table.index)
        ratio = values[last] / values[first] * 100
        table[f"{last}/{first}"] = ratio.map(lambda v: f"{v:.0f}%" if np.isfinite(v) else "—")
    return table.reset_index().rename_axis(columns=None)


def single_stream_prefill(summary: pd.DataFrame, contexts: list[str]) -> pd.DataFrame:
    """The seed's section 2: prefill tok/s (prompt tokens / TTFT) by context at
    concurrency 1."""
    return _by_context(summary, contexts, "prefill_tps", ".0f").reset_index().rename_axis(
        columns=None)


def ttft_table(summary: pd.DataFrame, contexts: list[str]) -> pd.DataFrame:
    """TTFT against prompt size at concurrency 1, next to what the server's own prefill
    rate predicts (the seed: TTFT ~ prompt / prefill, 118 s predicted, 120 s measured);
    the rest is HTTP, the first decode step and the link."""
    one = _ctx_sorted(summary[summary["conc"] == 1], _row_keys(summary) + ["ctx"], contexts)
    figures = ["prompt_tokens", "ctx_tokens", "ttft_ms", "prefill_tps", "server_prefill_tps"]
    one = one.assign(**{f: pd.to_numeric(one.get(f), errors="coerce") for f in figures})
    prompt = one["prompt_tokens"].fillna(one["ctx_tokens"])
    compute_ms = one["prompt_tokens"] / one["server_prefill_tps"] * 1000
    columns: dict[str, Any] = {k: one[k] for k in _row_keys(summary) + ["ctx"]}
    columns["prompt tokens"] = prompt.map(lambda v: f"{v:.0f}" if np.isfinite(v) else "—")
    for title, values, spec in [
        ("TTFT (ms)", one["ttft_ms"], _ms),
        ("prefill (tok/s)", one["prefill_tps"], ".0f"),
        ("server prefill (tok/s)", one["server_prefill_tps"], ".0f"),
        ("prompt ÷ server prefill (ms)", compute_ms, _ms),
        ("TTFT beyond that (ms)", one["ttft_ms"] - compute_ms, _ms),
    ]:
        columns[title] = [_cell_text(v, s, spec)
                          for v, s in zip(values, one["status"], strict=True)]
    return pd.DataFrame(columns).reset_index(drop=True)


# ---------------------------------------------------------------- link comparison


def pick_baseline(summary: pd.DataFrame, baseline_link: str | None = None) -> str | None:
    """The configured baseline; else the link named "baseline"; else the first link."""
    if baseline_link:
        return baseline_link
    links = sorted(summary["link"].dropna().unique())
    if "baseline" in links:
        return "baseline"
    return links[0] if links else None


def compare_links(summary: pd.DataFrame, baseline_link: str | None = None,
                  drift: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every other link's concurrency-1 cell against the baseline link's cell of the same
    pair, model and context, with numeric differences and their uncertainty.

    Columns `*_base` hold the baseline's figures; `status_base` is NaN where the baseline
    has no such cell. A paired cell (it alternated with the baseline, `paired_*` in the
    summary) gives its paired differences; otherwise the two cells' figures are
    subtracted and their uncertainty widened by the machine's variation over time,
    which `drift` (comparison.machine_drift) measures per pair and model. Without it, or
    where a cell's own uncertainty is the per-token floor of a single request, the
    uncertainty is a lower bound (`*_lower_bound`). Uncertainties are COVERAGE standard
    errors; `*_resolvable` is NA where unknown or only a lower bound is exceeded, else
    whether the difference lies outside the uncertainty (never guessed).
    """
    base_name = pick_baseline(summary, baseline_link)
    one = summary[summary["conc"] == 1]
    paired = ["paired_decode_delta_ms", "paired_decode_delta_se", "paired_prefill_change_pct",
              "paired_prefill_change_se", "paired_reference_decode_ms",
              "paired_reference_prefill_tps", "paired_rr64_delta_us", "paired_rr64_delta_se",
              "paired_rounds"]
    columns = ["status", "prefill_tps", "prefill_tps_se", "decode_ms_per_token",
               "decode_ms_se", "decode_tps", "ttft_ms", "uncertainty_from", "flags",
               "rpc_bytes_per_token_a_to_b", "rpc_bytes_per_token_b_to_a", *paired]
    one = one.reindex(columns=COMPARE_KEYS + ["link"] + columns)
    numeric = [c for c in columns if c not in ("status", "uncertainty_from", "flags")]
    one[numeric] = one[numeric].apply(pd.to_numeric, errors="coerce")
    base = one[one["link"] == base_name].drop(columns=["link", *paired])
    comp = one[one["link"] != base_name].merge(base, on=COMPARE_KEYS, how="left",
                                               suffixes=("", "_base"))
    comp.insert(comp.columns.get_loc("link") + 1, "baseline", base_name)
    drift = drift if drift is not None else pd.DataFrame(
        columns=["pair", "model", "drift_decode_rel", "drift_prefill_rel"])
    comp = comp.merge(drift, on=["pair", "model"], how="left")
    _sequential(comp)
    _paired(comp)
    for figure, unc, name in [("prefill_change_pct", "prefill_change_unc_pct", "prefill"),
                              ("decode_delta_ms", "decode_delta_unc_ms", "decode")]:
        known = comp[unc].notna() & comp[figure].notna()
        outside = comp[figure].abs() > comp[unc]
        # Exceeding a lower bound proves nothing; lying inside it does.
        resolvable = outside.where(known & ~(outside & comp[f"{name}_lower_bound"]))
        comp[f"{name}_resolvable"] = resolvable.astype("boolean")
    return comp.reset_index(drop=True)


def _sequential(comp: pd.DataFrame) -> None:
    """Differences of two cells measured at different times, with the machine's
    variation over time (the anchors' drift) in their uncertainty."""
    ratio = comp["prefill_tps"] / comp["prefill_tps_base"]
    comp["prefill_change_pct"] = (ratio - 1) * 100
    drift_p = pd.to_numeric(comp["drift_prefill_rel"], errors="coerce")
    drift_d = pd.to_numeric(comp["drift_decode_rel"], errors="coerce")
    comp["prefill_change_unc_pct"] = COVERAGE * 100 * ratio * np.sqrt(
        (comp["prefill_tps_se"] / comp["prefill_tps"]) ** 2
        + (comp["prefill_tps_se_base"] / comp["prefill_tps_base"]) ** 2
        + 2 * drift_p.fillna(0) ** 2)  # each cell varies by drift_p over time
    comp["decode_delta_ms"] = comp["decode_ms_per_token"] - comp["decode_ms_per_token_base"]
    comp["decode_delta_unc_ms"] = COVERAGE * np.sqrt(
        comp["decode_ms_se"] ** 2 + comp["decode_ms_se_base"] ** 2
        + drift_d.fillna(0) ** 2 * (comp["decode_ms_per_token"] ** 2
                                    + comp["decode_ms_per_token_base"] ** 2))
    one_request = comp["uncertainty_from"].eq("tokens") | comp["uncertainty_from_base"].eq(
        "tokens")
    comp["decode_lower_bound"] = drift_d.isna() | one_request
    comp["prefill_lower_bound"] = drift_p.isna()
    comp["compared"] = np.where(drift_d.notna(), "sequential (machine drift included)",
                                "sequential (no drift measured)")


def _paired(comp: pd.DataFrame) -> None:
    """Cells measured round by round against the baseline: their paired differences."""
    has = comp["paired_decode_delta_ms"].notna()
    if not has.any():
        return
    comp.loc[has, "decode_delta_ms"] = comp.loc[has, "paired_decode_delta_ms"]
    comp.loc[has, "decode_delta_unc_ms"] = COVERAGE * comp.loc[has, "paired_decode_delta_se"]
    comp.loc[has, "prefill_change_pct"] = comp.loc[has, "paired_prefill_change_pct"]
    comp.loc[has, "prefill_change_unc_pct"] = (COVERAGE
                                               * comp.loc[has, "paired_prefill_change_se"])
    comp.loc[has, "decode_ms_per_token_base"] = comp.loc[has, "paired_reference_decode_ms"]
    comp.loc[has, "prefill_tps_base"] = comp.loc[has, "paired_reference_prefill_tps"]
    comp.loc[has, ["decode_lower_bound", "prefill_lower_bound"]] = False
    comp.loc[has, "compared"] = [f"paired ({n:.0f} rounds)"
                                 for n in comp.loc[has, "paired_rounds"]]


def _delta_text(value: float, unc: float, resolvable: Any, lower_bound: Any, status: Any,
                status_base: Any, spec: str, unit: str = "") -> str:
    if not isinstance(status_base, str):
        return "— (no baseline cell)"
    if status != "ok":
        return status_text(status)
    if status_base != "ok":
        return f"baseline {status_text(status_base)}"
    if not np.isfinite(value):
        return "—"
    text = format(value, "+" + spec) + unit
    if np.isfinite(unc):
        text += f" ±{format(unc, spec)}{unit}"
    if resolvable is False:
        return f"not resolvable ({text})"
    if np.isfinite(unc) and lower_bound is True:
        text += " (± a lower bound)"
    return text


def link_comparison(summary: pd.DataFrame, contexts: list[str],
                    baseline_link: str | None = None, drift: pd.DataFrame | None = None,
                    prediction: Callable[[pd.DataFrame], pd.DataFrame] | None = None
                    ) -> pd.DataFrame:
    """The seed's table 1, one row per model, link and context: prefill relative change
    (%) and decode delta ms/token against the baseline link at concurrency 1, how they
    were compared, and, with `prediction` (rows -> comparison.predicted_decode_delta),
    the decode difference predicted from the links' measured latency and whether the
    measurement agrees. A difference that no link can have (faster than the baseline
    beyond its uncertainty) or that disagrees with the prediction is marked with ⚠."""
    comp = compare_links(summary, baseline_link, drift)
    keys = _row_keys(summary) + ["ctx"]
    comp = _ctx_sorted(comp, keys, contexts).reset_index(drop=True)
    predicted = prediction(comp) if prediction is not None and len(comp) else None
    prefill, decode, expected, verdicts = [], [], [], []
    for i, row in comp.iterrows():
        prefill.append(_delta_text(row["prefill_change_pct"], row["prefill_change_unc_pct"],
                                   _bool(row["prefill_resolvable"]),
                                   _bool(row["prefill_lower_bound"]), row["status"],
                                   row["status_base"], ".0f", "%"))
        text = _delta_text(row["decode_delta_ms"], row["decode_delta_unc_ms"],
                           _bool(row["decode_resolvable"]), _bool(row["decode_lower_bound"]),
                           row["status"], row["status_base"], ".2f")
        if _bool(row["decode_resolvable"]) and row["decode_delta_ms"] < 0:
            text += f" {FLAG_MARK} faster than the baseline: no link can be"
        base_flagged = isinstance(row.get("flags_base"), str) and not row["compared"].startswith(
            "paired")  # a paired cell's baseline is the one measured alongside, not this
        if isinstance(row["flags"], str) or base_flagged:
            text += f" {FLAG_MARK} flagged (see the note)"
        decode.append(text)
        guess = predicted.loc[i] if predicted is not None else None
        expected.append(_prediction_text(guess))
        verdicts.append(_agreement(row, guess))
    table = pd.DataFrame({
        **{k: comp[k] for k in keys},
        "baseline": comp["baseline"],
        "compared": comp["compared"],
        "prefill base (tok/s)": _texts(comp["prefill_tps_base"], comp["status_base"], ".0f"),
        "prefill (tok/s)": _texts(comp["prefill_tps"], comp["status"], ".0f"),
        "prefill Δ": prefill,
        "decode base (ms/token)": _texts(comp["decode_ms_per_token_base"],
                                         comp["status_base"], ".2f"),
        "decode (ms/token)": _texts(comp["decode_ms_per_token"], comp["status"], ".2f"),
        "decode Δ (ms/token)": decode,
    })
    if predicted is not None:
        table["predicted Δ (ms/token)"] = expected
        table["measured vs predicted"] = verdicts
    return table


def _prediction_text(guess: pd.Series | None) -> str:
    if guess is None or not np.isfinite(guess["predicted_decode_delta_ms"]):
        return "—"
    text = f"{guess['predicted_decode_delta_ms']:+.2f}"
    unc = guess["predicted_decode_delta_unc_ms"]
    text += f" ±{unc:.2f}" if np.isfinite(unc) else ""
    parts = guess.get("predicted_latency_ms"), guess.get("predicted_bandwidth_ms")
    if all(p is not None and np.isfinite(p) for p in parts):
        text += f" (latency {parts[0]:+.2f}, bandwidth {parts[1]:+.2f})"
    elif parts[1] is not None and not np.isfinite(parts[1]):
        text += " (latency only: the bandwidth term is unknown)"
    return text


def _agreement(row: pd.Series, guess: pd.Series | None) -> str:
    """Whether the measured decode difference agrees with the prediction within their
    combined uncertainty; what is missing when it cannot be judged."""
    if guess is None or not np.isfinite(guess["predicted_decode_delta_ms"]):
        return "— (no latency or round-trip measurement)"
    if row["status"] != "ok" or row["status_base"] != "ok" or \
            not np.isfinite(row["decode_delta_ms"]):
        return "—"
    measured, unc = row["decode_delta_ms"], row["decode_delta_unc_ms"]
    if not np.isfinite(unc):
        return "— (the measurement has no uncertainty)"
    gap = measured - guess["predicted_decode_delta_ms"]
    predicted_unc = guess["predicted_decode_delta_unc_ms"]
    # Both uncertainties are COVERAGE standard errors; the check allows AGREEMENT_SIGMAS.
    allowed = float(np.hypot(unc, np.nan_to_num(predicted_unc))) * AGREEMENT_SIGMAS / COVERAGE
    notes = [n for n, on in (("± a lower bound", _bool(row["decode_lower_bound"])),
                             ("the prediction's ± unknown", not np.isfinite(predicted_unc)))
             if on]
    suffix = f" ({'; '.join(notes)})" if notes else ""
    if abs(gap) <= allowed:
        return f"agrees ({gap:+.2f} within ±{allowed:.2f}){suffix}"
    return f"{FLAG_MARK} disagrees by {gap:+.2f} (more than ±{allowed:.2f}){suffix}"


def _texts(values: pd.Series, statuses: pd.Series, spec: str) -> list[str]:
    return [_cell_text(v, s, spec) for v, s in zip(values, statuses, strict=True)]


def _bool(value: Any) -> bool | None:
    return None if value is pd.NA or value is None else bool(value)


# ---------------------------------------------------------------- concurrency


def concurrency_boundary(summary: pd.DataFrame, contexts: list[str]) -> pd.DataFrame:
    """The seed's section 3: per model, link and context, the highest concurrency level up
    to which every level is ok, with the failure mode at the next level in parentheses
    ("2 (crashes at 4)", "2 (500 at 4)", "1 (fails at 2)"); "❌ 400" where even one
    stream fails."""
    levels = sorted(summary["conc"].unique())
    keys = _row_keys(summary)
    statuses = summary.pivot(index=keys + ["ctx"], columns="conc", values="status")
    statuses = statuses.reindex(columns=levels)
    text = pd.Series([_boundary(list(row), levels) for row in statuses.itertuples(index=False)],
                     index=statuses.index)
    return _wide_by_context(text, contexts)


def _boundary(statuses: list[Any], levels: list[int]) -> str:
    if not levels or statuses[0] != "ok":
        return status_text(statuses[0]) if levels else "—"
    top = levels[0]
    for level, status in zip(levels[1:], statuses[1:], strict=True):
        if not isinstance(status, str):
            break  # next level not measured: the boundary is as far as we know
        if status != "ok":
            return f"{top} ({FAILURE_AT.get(status, status)} at {level})"
        top = level
    return str(top)


def _wide_by_context(text: pd.Series, contexts: Sequence[str]) -> pd.DataFrame:
    table = text.unstack("ctx")
    table = table.reindex(columns=[c for c in contexts if c in table.columns]).fillna("—")
    return table.reset_index().rename_axis(columns=None)


def overlap_table(summary: pd.DataFrame, contexts: list[str]) -> pd.DataFrame:
    """The seed's true concurrency ratio per model, link and context, one figure per
    concurrency level above 1 ("2-way / 4-way")."""
    levels = sorted(c for c in summary["conc"].unique() if c > 1)
    keys = _row_keys(summary)
    if not levels:
        return pd.DataFrame(columns=keys)
    many = summary[summary["conc"] > 1]
    flags = many["flags"] if "flags" in many else pd.Series(None, index=many.index)
    text = many.assign(text=[_flagged(_overlap_text(v, s), f) for v, s, f in
                             zip(many["overlap"], many["status"], flags, strict=True)])
    wide = text.pivot(index=keys + ["ctx"], columns="conc", values="text")
    joined = wide.reindex(columns=levels).fillna("—").agg(" / ".join, axis=1)
    return _wide_by_context(joined, contexts)


def overlap_levels(summary: pd.DataFrame) -> str:
    """"2-way / 4-way" for the concurrency levels the overlap table shows."""
    return " / ".join(f"{c}-way" for c in sorted(summary["conc"].unique()) if c > 1)


def _overlap_text(value: float, status: Any) -> str:
    if np.isfinite(value):
        # A completed cell classed as failed (decode below the crash threshold) still has
        # a real overlap; show it with the failure beside it.
        figure = f"{round(value, 1) + 0.0:.1f}"  # + 0.0: no "-0.0"
        if value > OVERLAP_MAX:
            figure += f" {FLAG_MARK}"  # more than fully concurrent: noise in T1 or W
        return figure if status == "ok" else f"{figure} {status_text(status)}"
    return status_text(status) if status != "ok" else "—"


# ---------------------------------------------------------------- mechanisms


def read_links(link_files: list[str]) -> pd.DataFrame:
    """Link results, one row per (pair, link)."""
    if not link_files:
        return pd.DataFrame(columns=["pair", "link"])
    return pd.concat([pq.read_table(p).to_pandas() for p in link_files], ignore_index=True)


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


def mechanism_points(summary: pd.DataFrame, links: pd.DataFrame,
                     baseline_link: str | None = None,
                     drift: pd.DataFrame | None = None) -> pd.DataFrame:
    """One point per non-baseline link, model and context (concurrency 1, both cells ok):
    decode delta, less its bandwidth term (traffic.bandwidth_delta), against the links'
    latency difference; prefill relative change against relative one-way bandwidth
    (A->B, the direction a prompt's activations travel)."""
    comp = compare_links(summary, baseline_link, drift)
    comp = comp[(comp["status"] == "ok") & (comp["status_base"] == "ok")]
    latency = latency_column(links)
    facts = links.reindex(columns=["pair", "link", latency, "a_to_b_gbps"]).rename(
        columns={latency: "latency_us", "a_to_b_gbps": "gbps"})
    comp = comp.merge(facts, on=["pair", "link"], how="left").merge(
        facts.rename(columns={"link": "baseline"}), on=["pair", "baseline"], how="left",
        suffixes=("", "_base"))
    bandwidth = traffic.bandwidth_delta(comp, links)
    return comp.assign(
        latency_delta_ms=(comp["latency_us"] - comp["latency_us_base"]) / 1000,
        bandwidth_change=comp["gbps"] / comp["gbps_base"] - 1,
        prefill_change=comp["prefill_change_pct"] / 100,
        bandwidth_ms=bandwidth["bandwidth_ms"],
        bandwidth_unc_ms=bandwidth["bandwidth_unc_ms"],
        bandwidth_what=bandwidth["bandwidth_what"],
        # What the link's latency must explain: the delta less its bandwidth term
        # (all of it where that term is unknown: no bytes or throughput measured).
        decode_latency_ms=comp["decode_delta_ms"] - bandwidth["bandwidth_ms"].fillna(0),
    )


def _slopes_by(points: pd.DataFrame, key: str, x: str, y: str, order: Sequence[str]) -> str:
    fits = {k: fit_through_origin(g[x], g[y])["slope"] for k, g in points.groupby(key)}
    return " / ".join(f"{k} {fits[k]:.2f}" for k in order
                      if k in fits and np.isfinite(fits[k])) or "—"


def mechanisms(summary: pd.DataFrame, links: pd.DataFrame, contexts: list[str],
               baseline_link: str | None = None,
               drift: pd.DataFrame | None = None,
               prediction: Callable[[pd.DataFrame], pd.DataFrame] | None = None
               ) -> pd.DataFrame:
    """The seed's conclusions 1 and 2, computed per model: implied round trips per token
    (decode delta vs request-response latency difference) and prefill's elasticity to
    one-way bandwidth, each with its fit quality and a one-line verdict that the data
    must carry: a slope not resolvable from zero, of an impossible sign, or with a low
    R² gives "not resolvable on this data" with the reason, never a number. With
    `prediction` (see link_comparison), a decode verdict whose fit has no number takes
    its latency term from the measured round trips."""
    points = mechanism_points(summary, links, baseline_link, drift)
    if prediction is not None and len(points):
        # The latency term from the round-trip sweep, where the cells' own fit has none.
        predicted = prediction(points)
        points["predicted_latency_ms"] = predicted["predicted_latency_ms"]
        points["predicted_latency_unc_ms"] = predicted["predicted_latency_unc_ms"]
    latency = latency_column(links)
    rows = []
    for (pair, model), _ in summary.groupby(["pair", "model"]):
        mine = points[(points["pair"] == pair) & (points["model"] == model)]
        decode = mine.reindex(columns=["link", "ctx", "latency_delta_ms", "decode_delta_ms",
                                       "decode_latency_ms", "bandwidth_ms", "bandwidth_what",
                                       "predicted_latency_ms", "predicted_latency_unc_ms",
                                       "bandwidth_unc_ms",
                                       "decode_delta_unc_ms", "decode_lower_bound",
                                       "drift_decode_rel"]).dropna(
            subset=["latency_delta_ms", "decode_delta_ms"])
        prefill = mine[["link", "ctx", "bandwidth_change", "prefill_change", "gbps",
                        "gbps_base", "prefill_change_unc_pct", "prefill_lower_bound"]
                       ].dropna(subset=["bandwidth_change", "prefill_change", "gbps",
                                        "gbps_base"])
        prefill = prefill.assign(prefill_change_unc=prefill["prefill_change_unc_pct"] / 100)
        rows.append(_mechanism_row(pair, model, "decode",
                                   f"Δ {latency} (ms), after the bandwidth term", decode,
                                   "latency_delta_ms", "decode_latency_ms", contexts))
        rows.append(_mechanism_row(pair, model, "prefill", "relative A→B bandwidth",
                                   prefill, "bandwidth_change", "prefill_change", contexts))
    table = pd.DataFrame(rows)
    if summary["pair"].nunique() <= 1:
        table = table.drop(columns="pair")
    return table


def _mechanism_row(pair: str, model: str, mechanism: str, against: str, points: pd.DataFrame,
                   x: str, y: str, contexts: Sequence[str]) -> dict[str, Any]:
    unc = "decode_delta_unc_ms" if mechanism == "decode" else "prefill_change_unc"
    sigma = points[unc] / COVERAGE if unc in points else None
    fit = fit_through_origin(points[x], points[y], sigma)
    if sigma is not None and "drift_decode_rel" in points and np.isfinite(fit["slope"]):
        # The latencies were measured minutes before the cells; the machine's drift
        # moves them too: an uncertainty in x, carried into y through the slope (one
        # refit with the effective variance).
        sigma_x = pd.to_numeric(points["drift_decode_rel"]).fillna(0) * points[x].abs()
        fit = fit_through_origin(points[x], points[y], np.hypot(sigma, fit["slope"] * sigma_x))
    lower = f"{mechanism}_lower_bound"
    fit["lower_bound"] = bool(points[lower].fillna(True).astype(bool).any()) \
        if lower in points and len(points) else True
    by_context = _slopes_by(points, "ctx", x, y, contexts)
    verdict = (_decode_verdict(fit, points) + _dominant_terms(fit, points)
               if mechanism == "decode" else _prefill_verdict(fit, points))
    return {
        "pair": pair, "model": model, "mechanism": mechanism, "against": against,
        "slope": round(fit["slope"], 3),
        "±": round(COVERAGE * fit["slope_se"], 3),
        "R²": round(fit["r2"], 2),
        "points": fit["n"],
        "links": points["link"].nunique(),
        "by link": _slopes_by(points, "link", x, y, sorted(points["link"].unique())),
        "by context": by_context,
        "bandwidth term (ms/token)": _bandwidth_by_link(points) if mechanism == "decode"
        else "—",
        "verdict": verdict,
    }


def _bandwidth_by_link(points: pd.DataFrame) -> str:
    """Each link's bandwidth term (median over contexts), "usb4 +1.02 / 5gbe +1.05"."""
    if points.empty or points["bandwidth_ms"].isna().all():
        return "— (no bytes or throughput measured)"
    return " / ".join(f"{link} {group['bandwidth_ms'].median():+.2f}"
                      for link, group in points.groupby("link"))


def _dominant_terms(fit: dict[str, Any], points: pd.DataFrame) -> str:
    """Per link: the decode delta's bandwidth term (predicted from the token's bytes and
    the links' throughput) and its latency term (the round trips the sweep measured x
    the latency difference; without a sweep, the cells' fitted round trips where the
    fit has a number), each with its ±, and the term that dominates: only where the two
    differ by more than their combined ±. The sweep comes first: it measures round trips
    on their own, where the cells' fit inherits every cell's noise."""
    if points.empty:
        return ""
    if points["bandwidth_ms"].isna().all():
        return ("; the bandwidth term is unknown (no bytes per token or throughput "
                "measured): the fit counts all of the delta as latency")
    resolvable = np.isfinite(fit["slope"]) and fit["slope"] > 0 and not _unresolvable(
        fit, "latency")
    parts = []
    for link, group in points.groupby("link"):
        measured, unc = _weighted(group["decode_delta_ms"], group["decode_delta_unc_ms"])
        bandwidth = group["bandwidth_ms"].median()
        bandwidth_unc = group["bandwidth_unc_ms"].median()
        gap = group["latency_delta_ms"].median()
        swept = group["predicted_latency_ms"].median() if "predicted_latency_ms" in group \
            else np.nan
        if np.isfinite(swept):
            latency, latency_unc = swept, group["predicted_latency_unc_ms"].median()
            how = "the sweep's round trips × the latency difference"
        elif resolvable:
            latency, latency_unc = fit["slope"] * gap, COVERAGE * fit["slope_se"] * abs(gap)
            how = f"{fit['slope']:.1f} round trips × {gap:.2f} ms"
        else:
            latency, latency_unc, how = np.nan, np.nan, ""
        if not np.isfinite(bandwidth):
            continue
        what = group["bandwidth_what"].dropna()
        carried = f" ({what.iloc[0]})" if len(what) and bandwidth > 0 else ""
        figure = f"{measured:+.2f}" + (f" ±{unc:.2f}" if np.isfinite(unc) else "")
        if np.isfinite(unc) and abs(measured) <= unc:
            figure += " (not resolvable)"
        text = (f"{link}: {figure} ms/token measured, predicted bandwidth {bandwidth:+.2f}"
                f"{_plus_minus(bandwidth_unc)}{carried}")
        if np.isfinite(latency):
            text += f" + latency {latency:+.2f}{_plus_minus(latency_unc)} ({how}): "
            text += _dominance(bandwidth, bandwidth_unc, latency, latency_unc)
        else:
            text += ", latency term unknown (no round trips resolved or measured)"
        parts.append(text)
    return ("; per link: " + "; ".join(parts)) if parts else ""


def _plus_minus(unc: float) -> str:
    return f" ±{unc:.2f}" if np.isfinite(unc) else ""


def _dominance(bandwidth: float, bandwidth_unc: float, latency: float,
               latency_unc: float) -> str:
    """Which term is larger beyond their combined uncertainty (unknown ± counts as 0)."""
    allowed = float(np.hypot(np.nan_to_num(bandwidth_unc), np.nan_to_num(latency_unc)))
    if abs(bandwidth) - abs(latency) > allowed:
        return "bandwidth dominates"
    if abs(latency) - abs(bandwidth) > allowed:
        return "latency dominates"
    return f"neither dominates (they differ by less than ±{allowed:.2f})"


def _weighted(values: pd.Series, unc: pd.Series) -> tuple[float, float]:
    """The inverse-variance mean of a link's deltas over contexts and its uncertainty
    (their median and no uncertainty where one is missing)."""
    values, unc = values.to_numpy(dtype=float), unc.to_numpy(dtype=float)
    if len(values) and np.all(np.isfinite(unc)) and np.all(unc > 0):
        weights = 1 / unc**2
        return float(np.sum(weights * values) / np.sum(weights)), float(
            1 / np.sqrt(np.sum(weights)))
    return (float(np.median(values)) if len(values) else np.nan), np.nan


def _unresolvable(fit: dict[str, Any], what: str) -> list[str]:
    """Why a fit cannot carry a verdict: not resolvable from zero, or a low R²."""
    slope, unc = fit["slope"], COVERAGE * fit["slope_se"]
    reasons = []
    if not np.isfinite(unc):
        reasons.append(f"{slope:.2f} has no uncertainty (one point)")
    elif abs(slope) <= unc:
        reasons.append(f"{slope:+.2f} ±{unc:.2f} is not resolvable from zero")
    if np.isfinite(fit["r2"]) and fit["r2"] < 0.5:
        reasons.append(f"{what} explains the differences poorly (R² {fit['r2']:.2f})")
    return reasons


def _decode_verdict(fit: dict[str, Any], points: pd.DataFrame) -> str:
    if not np.isfinite(fit["slope"]):
        return ("no ok cell pairs on links with a request-response latency difference: "
                "nothing to fit")
    if _varies_with_context(points) and not fit["lower_bound"]:
        # No single number: the per-token cost grows (or shrinks) with context (judged
        # only against uncertainties that include run-to-run variation).
        per = []
        for ctx, group in points.groupby("ctx", sort=False):
            f = fit_through_origin(group["latency_delta_ms"], group["decode_latency_ms"],
                                   group["decode_delta_unc_ms"] / COVERAGE)
            per.append(f"{ctx} {f['slope']:.1f}" + (f" ±{COVERAGE * f['slope_se']:.1f}"
                                                    if np.isfinite(f["slope_se"]) else ""))
        return ("no single number of round trips: the cost per token changes with context "
                f"({', '.join(per)} round trips' worth of latency; a term that grows with "
                "context, such as bandwidth, adds to latency)")
    slope, unc = fit["slope"], COVERAGE * fit["slope_se"]
    reasons = _unresolvable(fit, "latency")
    if slope < 0 and np.isfinite(unc) and abs(slope) > unc:
        reasons.insert(0, f"the slope is {slope:+.2f} ±{unc:.2f}: negative round trips "
                          "are impossible (noise or a fault in the setup)")
    if reasons:
        return "not resolvable on this data: " + "; ".join(reasons)
    text = f"decode pays ~{slope:.1f} ±{unc:.1f} round trips of link latency per token"
    if np.isfinite(fit["r2"]):
        text += f" (R² {fit['r2']:.2f}, {fit['n']} points)"
    if fit["lower_bound"]:
        text += "; ± from per-cell spreads alone, a lower bound"
    varies = _varies_with_context(points)
    if varies is False:
        # The seed's fixed-cost signature: the delta does not grow with context even
        # though per-token time does.
        text += "; the same at every context (a fixed per-token cost)"
    elif varies:  # with lower-bound uncertainties only: a hint, not a finding
        text += "; it may change with context (the ± are lower bounds)"
    return text


def _varies_with_context(points: pd.DataFrame) -> bool | None:
    """Whether two contexts' round-trip slopes differ by more than their measured
    uncertainty (propagated from the deltas' own uncertainty, not from the scatter, which
    is what is being judged); without uncertainty, by more than a quarter. None with
    fewer than two contexts."""
    slopes = []
    for _, group in points.groupby("ctx"):
        x = group["latency_delta_ms"].to_numpy()
        sxx = float(np.sum(x * x))
        if sxx == 0:
            continue
        sigma = group["decode_delta_unc_ms"].to_numpy(dtype=float) / COVERAGE
        se = np.sqrt(np.sum((x * sigma) ** 2)) / sxx  # NaN where a delta has no uncertainty
        slopes.append((float(np.sum(x * group["decode_latency_ms"].to_numpy()) / sxx), se))
    if len(slopes) < 2:
        return None
    return any(abs(a - b) > COVERAGE * np.hypot(sa, sb) if np.isfinite(np.hypot(sa, sb))
               else abs(a - b) > 0.25 * max(abs(a), abs(b))
               for i, (a, sa) in enumerate(slopes) for b, sb in slopes[i + 1:])


def _prefill_verdict(fit: dict[str, Any], points: pd.DataFrame) -> str:
    if not np.isfinite(fit["slope"]):
        return "no ok cell pairs on links of different bandwidth: nothing to fit"
    elasticity, unc = fit["slope"], COVERAGE * fit["slope_se"]
    floor = min(points["gbps"].min(), points["gbps_base"].min())
    biggest = points.loc[points["bandwidth_change"].abs().idxmax()]
    gains = points[points["link"] == biggest["link"]]["prefill_change"] * 100
    example = (f"{biggest['bandwidth_change'] * 100:+.0f}% bandwidth ({biggest['link']}): "
               f"{gains.min():+.0f}% to {gains.max():+.0f}% prefill")
    figure = f"elasticity {elasticity:.2f}" + (f" ±{unc:.2f}" if np.isfinite(unc) else "")
    # Insensitive: the whole interval lies inside +-INSENSITIVE_BELOW (a low R² is
    # expected there: there is no trend to explain).
    if np.isfinite(unc) and abs(elasticity) + unc < INSENSITIVE_BELOW:
        bound = "; ± from per-cell spreads alone, a lower bound" if fit["lower_bound"] else ""
        return (f"prefill insensitive to bandwidth above {floor:.2f} Gbit/s ({figure}; "
                f"{example}){bound}")
    reasons = _unresolvable(fit, "bandwidth")
    if elasticity < 0 and np.isfinite(unc) and abs(elasticity) > unc:
        reasons.insert(0, f"prefill falls as bandwidth rises ({figure}): other differences "
                          "between the links dominate")
    if reasons:
        return f"not resolvable on this data: {'; '.join(reasons)} ({example})"
    head = ("prefill partly bandwidth-bound" if elasticity < TRACKS_ABOVE
            else "prefill tracks one-way bandwidth")
    text = f"{head} ({figure}; {example})"
    if fit["lower_bound"]:
        text += "; ± from per-cell spreads alone, a lower bound"
    return text


# ---------------------------------------------------------------- output


def to_markdown(frame: pd.DataFrame) -> str:
    columns = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join("—" if _missing(v) else str(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def write_table(frame: pd.DataFrame, stem: str | Path, title: str, note: str = "") -> None:
    """stem.csv and stem.md (the title, the table, then note as Markdown, if any)."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(stem.with_suffix(".csv"), index=False)
    stem.with_suffix(".md").write_text(f"## {title}\n\n{to_markdown(frame)}{note}")


def links_table(links: pd.DataFrame,
                interference_limits: dict[str, Any] | None = None) -> pd.DataFrame:
    """The seed's Links table (Gbit/s, ms) plus request-response latency and what was
    negotiated and emulated, from the link results' rows (read_links); a link measured
    while other work used the CPUs has it in its flags (⚠)."""
    # Older or partial link results lack some columns: show them as unknown.
    rates = [f"{c}{s}" for c in ("a_to_b_gbps", "b_to_a_gbps", "bidir_gbps")
             for s in ("", "_min", "_max")]
    links = links.reindex(columns=list(dict.fromkeys([
        *links.columns, "pair", "link", *rates, "ping_ms", "rr16k_p50_us", "rr_fixed_us",
        "rr_us_per_kb", "negotiated_gbps", "emulation_rate", "emulation_delay", "flags"])))
    links[rates] = links[rates].apply(pd.to_numeric, errors="coerce")
    links[["emulation_rate", "emulation_delay"]] = links[
        ["emulation_rate", "emulation_delay"]].astype(object).fillna("none")

    def gbps(column: str) -> pd.Series:
        spread = links[f"{column}_max"] - links[f"{column}_min"]
        return [f"{v:.2f} ±{s / 2:.2f}" if s > 0 else f"{v:.2f}" if np.isfinite(v) else "—"
                for v, s in zip(links[column], spread, strict=True)]

    emulated = links["emulation_rate"].where(links["emulation_rate"] != "none", "")
    delay = links["emulation_delay"].where(links["emulation_delay"] != "none", "")
    return pd.DataFrame({
        "pair": links["pair"],
        "link": links["link"],
        "A→B": gbps("a_to_b_gbps"),
        "B→A": gbps("b_to_a_gbps"),
        "bidirectional total": gbps("bidir_gbps"),
        "idle ping (ms)": pd.to_numeric(links["ping_ms"]).round(3),
        "16 KB RR p50 (µs)": pd.to_numeric(links["rr16k_p50_us"]).round(0),
        "fixed overhead (µs)": pd.to_numeric(links["rr_fixed_us"]).round(0),
        "µs per KB": pd.to_numeric(links["rr_us_per_kb"]).round(2),
        "negotiated (Gbit/s)": links["negotiated_gbps"],
        "emulation": [" + ".join(x for x in (r, d) if x) or "none"
                      for r, d in zip(emulated, delay, strict=True)],
        "flags": [joined(f, *(f"{FLAG_MARK} {x}" for x in (i, m) if isinstance(x, str)))
                  for f, (i, m) in zip(links["flags"], interference.flag(
                      links, interference_limits or {})[["interference", "interference_missing"]]
                      .itertuples(index=False), strict=True)],
    })


def tables(summary: pd.DataFrame, links: pd.DataFrame, contexts: list[str],
           baseline_link: str | None = None, drift: pd.DataFrame | None = None,
           prediction: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
           interference_limits: dict[str, Any] | None = None
           ) -> dict[str, tuple[str, pd.DataFrame]]:
    """Every table by file stem: (title, frame). contexts: labels, shortest first.
    `drift` and `prediction`: see link_comparison."""
    base = pick_baseline(summary, baseline_link)
    levels = overlap_levels(summary) or "no concurrency level above 1"
    return {
        "links": ("Links (bandwidth in Gbit/s: median ± half the spread over repeats; "
                  f"flags {FLAG_MARK}: measured while other work used the CPUs)",
                  links_table(links, interference_limits)),
        "link_comparison": (
            f"Link comparison vs {base} at concurrency 1 (Δ = link − baseline; ± is "
            f"{COVERAGE:g} standard errors: paired rounds, or both cells' spread plus the "
            "machine's drift over the run; not resolvable: the difference lies "
            f"inside it; {FLAG_MARK}: a figure no link can have, a disagreement with the "
            "prediction from measured latency and bandwidth, or a flagged cell)",
            link_comparison(summary, contexts, base, drift, prediction)),
        "single_stream_decode": ("Single-stream decode (tok/s) by context; ❌ 400: context "
                                 f"wall, ❌ 500: overflow; {FLAG_MARK}: a flagged cell",
                                 single_stream_decode(summary, contexts)),
        "single_stream_prefill": ("Single-stream prefill (tok/s: prompt tokens / TTFT) by "
                                  f"context; {FLAG_MARK}: a flagged cell",
                                  single_stream_prefill(summary, contexts)),
        "ttft": ("Time to first token against prompt size (concurrency 1)",
                 ttft_table(summary, contexts)),
        "concurrency_boundary": (
            "Usable concurrency boundary: highest level up to which every level is ok "
            "(failure at the next level: crashes, 500 = overflow, 400 = context wall)",
            concurrency_boundary(summary, contexts)),
        "overlap": (f"True concurrency ratio (overlap), {levels}: 1 = fully concurrent, "
                    "0 = serial, below 0 = worse than serial; ❌: the cell's status; "
                    f"{FLAG_MARK}: above 1 (no cell can be more than fully concurrent) or a "
                    "flagged cell",
                    overlap_table(summary, contexts)),
        "link_traffic": (
            "Bytes per decoded token across the link (concurrency 1): measured (kernel "
            "TCP counters of the RPC connections) against the prediction from the "
            f"model's GGUF header and where its layers sit; {FLAG_MARK}: more than "
            f"{traffic.TOLERANCE:.0%} apart; transfer: the bytes above the link's burst "
            "allowance at its measured throughput",
            traffic.link_traffic(summary, links, contexts)),
        "mechanisms": (
            f"Mechanisms vs {base}: decode delta (ms/token) less its bandwidth term "
            "(the token's bytes at each link's throughput) against the links' request-"
            "response latency difference (slope = round trips per token) and prefill "
            "relative change against relative one-way bandwidth (slope = elasticity); "
            f"fits through the origin, ± is {COVERAGE:g} standard errors",
            mechanisms(summary, links, contexts, base, drift, prediction)),
    }


def aggregate(request_files: list[str], link_files: list[str], contexts: dict[str, int],
              summary_out: str, tables_dir: str, *, baseline_link: str | None = None,
              interference_limits: dict[str, Any] | None = None,
              anchor_files: Sequence[str] = (), sweep_files: Sequence[str] = (),
              workers: dict[str, int] | None = None) -> pd.DataFrame:
    """Summary Parquet and every table (Markdown and CSV) under tables_dir. The drift
    anchors give sequential comparisons the machine's drift; the round-trip sweeps
    (and each model's `workers`) the prediction from measured latency."""
    summary = summarize(request_files, contexts, interference_limits)
    parquet_io.write(summary, summary_out, {
        "cells": len(summary), "contexts": contexts, "baseline_link": baseline_link,
        "interference": interference.settings(interference_limits)})
    links = read_links(link_files)
    drift = comparison.machine_drift(anchor_files, summary,
                                     pick_baseline(summary, baseline_link))
    trips = comparison.round_trips(sweep_files)

    def prediction(rows: pd.DataFrame) -> pd.DataFrame:
        return comparison.predicted_decode_delta(rows, links, trips, workers or {}, drift)

    note = flag_note(summary)
    for stem, (title, frame) in tables(summary, links, by_length(contexts), baseline_link,
                                       drift, prediction, interference_limits).items():
        # The cells' flags under every table of cells that marks them.
        marks = FLAG_MARK in title and stem != "links"
        write_table(frame, Path(tables_dir) / stem, title, note if marks else "")
    results = Path(summary_out).parent.parent  # results/summary/cells.parquet
    write_table(remeasured(archive.archived_requests(results), summary),
                Path(tables_dir) / "remeasured",
                "Re-measured cells: the archived measurement against the current one")
    return summary


def flag_note(summary: pd.DataFrame) -> str:
    """Markdown naming every flagged cell and why, for the tables that mark them."""
    flagged = summary[summary["flags"].notna()] if "flags" in summary else summary.iloc[:0]
    if flagged.empty:
        return ""
    lines = [f"- {'/'.join(str(row[k]) for k in SUMMARY_KEYS)}: {row['flags']}"
             for _, row in flagged.iterrows()]
    return (f"\n{FLAG_MARK} flagged cells: measured under interference or with tokens "
            "that share timestamps (re-measure with `python -m splitbench drift --apply` "
            "and `snakemake all`), or without interference figures (not checked):\n\n"
            + "\n".join(lines) + "\n")


def remeasured(archived: list[Path], summary: pd.DataFrame) -> pd.DataFrame:
    """One row per archived measurement: when it was superseded, and its decode and
    prefill against the cell's current figures."""
    columns = ["pair", "link", "model", "ctx", "conc", "archived", "decode before (ms/token)",
               "decode now (ms/token)", "decode Δ (ms/token)", "prefill before (tok/s)",
               "prefill now (tok/s)", "status before", "status now"]
    rows = []
    current = summary.set_index(SUMMARY_KEYS)
    for path in archived:
        old = read_requests([str(path)])
        ok = old[old["status"] == "ok"]
        key = tuple(old.iloc[0][k] for k in SUMMARY_KEYS)
        now = current.loc[key] if key in current.index else None
        before = ok["decode_ms_per_token"].median() if len(ok) else None
        after = now["decode_ms_per_token"] if now is not None else None
        rows.append([*key, path.parts[-6], rounded(before, 3), rounded(after, 3),
                     rounded(after - before, 3) if None not in (before, after) else None,
                     rounded(ok["prefill_tps"].median() if len(ok) else None, 0),
                     rounded(now["prefill_tps"] if now is not None else None, 0),
                     old["cell_status"].iloc[0], now["status"] if now is not None else None])
    return pd.DataFrame(rows, columns=columns)


def rounded(value: float | None, digits: int) -> float | None:
    """value rounded for a table; None when missing or not finite."""
    if value is None or not np.isfinite(value):
        return None
    return round(float(value), digits)
