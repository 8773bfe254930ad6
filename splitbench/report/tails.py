"""The percentiles table: per cell, the tail of its time to first token, inter-token
latency and request latency beside their medians (summary/percentiles.py gives every
figure; the summary's percentiles Parquet holds them all)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from splitbench.findings import service_levels as level_findings
from splitbench.infra.intervals import UNBOUNDED, halfwidth
from splitbench.summary import service_levels

# (metric, the statistics shown, its label in the column titles, decimals)
SHOWN = [("time_to_first_token_ms", ("p50", "p99"), "TTFT (ms)", 2),
         ("inter_token_latency_ms", ("p50", "p90", "p99", "max"), "ITL (ms)", 2),
         ("time_per_output_token_ms", ("p50", "p99"), "TPOT (ms)", 2),
         ("request_latency_ms", ("p50", "p99"), "request latency (ms)", 1),
         ("output_token_throughput_per_user", ("p50",), "tokens/s per user", 1)]


def title() -> str:
    return ("Percentiles per cell: time to first token, inter-token latency (every gap "
            "between two tokens of a stream), time per output token, request latency and "
            "tokens per second per user over the cell's ok requests; a p99's ± is its 95% "
            "interval from a bootstrap over requests (1.96 standard deviations of the "
            "resamples' p99), and a p99 from fewer than 100 values says so (too few for "
            "a tail)")


def table(dist: pd.DataFrame, contexts: Sequence[str]) -> pd.DataFrame:
    """One row per cell (the pair only where there are several), a column per metric
    and statistic shown."""
    if dist.empty:
        return pd.DataFrame({"percentiles": ["no cell has ok requests"]})
    keys = (["pair"] if dist["pair"].nunique() > 1 else []) + ["model", "link", "ctx",
                                                                 "conc"]
    order = {c: i for i, c in enumerate(contexts)}
    columns = [f"{label} {stat}" for _, shown, label, _ in SHOWN for stat in shown]
    shown_for = {metric: (shown, label, places) for metric, shown, label, places in SHOWN}
    cells: dict[tuple, dict] = {}
    for figures in dist.to_dict("records"):  # one pass: a row lookup per figure is slow
        key = tuple(figures[k] for k in keys)
        row = cells.setdefault(key, {**dict(zip(keys, key, strict=True)),
                                     **dict.fromkeys(columns, "—")})
        if figures["metric"] in shown_for:
            shown, label, places = shown_for[figures["metric"]]
            for stat in shown:
                row[f"{label} {stat}"] = stat_text(figures, stat, places)
    rows = list(cells.values())
    frame = pd.DataFrame(rows)
    frame["_ctx"] = frame["ctx"].map(order)
    return frame.sort_values([k for k in keys if k not in ("ctx", "conc")]
                             + ["_ctx", "conc"]).drop(columns="_ctx").reset_index(drop=True)


def stat_text(figures: pd.Series | dict, stat: str, places: int) -> str:
    """A statistic as the table shows it: a p99 with its ± (its 95% interval: the
    bootstrap's standard deviation at the normal quantile, the resamples being many), or
    the count it stands on where that is too few for a tail."""
    value = figures[stat]
    if value is None or not np.isfinite(value):
        return "—"
    text = f"{value:.{places}f}"
    if stat != "p99":
        return text
    if figures["p99_too_few"]:
        return f"{text} (n={int(figures['count'])}: too few)"
    # The run-to-run term's ± where the aggregate gave one (between_runs).
    unc = figures.get("p99_unc")
    if unc is None or not np.isfinite(unc):
        se = figures["p99_se"]
        unc = halfwidth(se, UNBOUNDED) if se is not None and np.isfinite(se) else np.nan
    return text + (f" ±{unc:.{places}f}" if np.isfinite(unc) else "")


def service_levels_title(slo: dict) -> str:
    if not service_levels.targets_set(slo):
        return "Service levels: none set (`slo:` in the config)"
    return (f"Service levels per cell, {level_findings.level_text(slo)}: the requests that "
            "met every target with the share's 95% exact binomial (Clopper-Pearson) "
            "interval, over the cell's releases where several streams share one (a "
            "release's requests are not independent); the verdict: holds where the "
            "interval's lower end is at or above the level's share, fails where its upper "
            "end is below it, not resolvable otherwise (with about how many requests at "
            "the same share would resolve it); and the goodput (the requests that met it "
            "per second of measuring), whose ± is the share's interval times the cell's "
            "requests per second")


def service_levels_table(levels: pd.DataFrame, contexts: Sequence[str]) -> pd.DataFrame:
    """One row per cell: requests, met, met % with its interval, the sample it was
    judged on, the verdict and goodput with its ±."""
    if levels.empty:
        return pd.DataFrame({"service levels": [
            "no service level set: add `slo:` to the config (ttft_ms, tokens_per_s, "
            "share_pct), or no cell was measured"]})
    keys = (["pair"] if levels["pair"].nunique() > 1 else []) + ["model", "link", "ctx",
                                                                   "conc"]
    order = {c: i for i, c in enumerate(contexts)}
    frame = levels.assign(_ctx=levels["ctx"].map(order)).sort_values(
        [k for k in keys if k not in ("ctx", "conc")] + ["_ctx", "conc"])
    cells = frame.to_dict("records")
    return pd.DataFrame({
        **{k: frame[k] for k in keys},
        "requests": frame["requests"],
        "met": frame["met"],
        "met (%)": [f"{c['met_pct']:.0f}" for c in cells],
        "95% interval (%)": [_span(c) for c in cells],
        "judged on": [f"{c['releases']} releases" if c["sample_unit"] == "releases"
                      else "requests" for c in cells],
        "verdict": [_verdict(c) for c in cells],
        "goodput (req/s)": [_goodput(c) for c in cells],
    }).reset_index(drop=True)


def _span(cell: dict) -> str:
    """The share's interval rounded outwards, as the verdict read it."""
    return (f"{np.floor(cell['met_low_pct'] + 1e-9):.0f}–"
            f"{np.ceil(cell['met_high_pct'] - 1e-9):.0f}")


def _verdict(cell: dict) -> str:
    if cell["verdict"] == service_levels.HOLDS:
        return "✓ holds"
    if cell["verdict"] == service_levels.FAILS:
        return "✗ fails"
    needed = cell["requests_needed"]
    return service_levels.UNRESOLVED + ("" if pd.isna(needed)
                                        else f" (about {int(needed)} requests)")


def _goodput(cell: dict) -> str:
    value, unc = cell["goodput_rps"], cell["goodput_rps_unc"]
    if value is None or not np.isfinite(value):
        return "—"
    return f"{value:.2f}" + (f" ±{unc:.2f}" if unc is not None and np.isfinite(unc) else "")
