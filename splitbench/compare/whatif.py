"""What if my link were X: decode predicted for any link from this run's measurements.

A decode step on a split model is the hosts' compute plus what the link adds: the
blocking round trips per token at the link's request-response latency, and the token's
bytes each way at the link's rate. The baseline link's measured step, less its own
latency and wire terms, is the compute; any other link is that plus its own terms:

    decode(link) = compute + round_trips x rtt(link) + bytes_a_to_b x 8 / rate_a_to_b
                           + bytes_b_to_a x 8 / rate_b_to_a
    compute      = decode(baseline) - round_trips x rtt(baseline) - wire(baseline)

Round trips come from the delay sweep where it resolved them; otherwise from the
topological floor (one per RPC worker), which the model then says it assumed. The
prediction's uncertainty carries the baseline step's and the round trips' (at
95% intervals). `model` builds one row per pair, model and
context; `predict` evaluates it for a link; `curve` for a range of latencies.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from splitbench.compare import traffic
from splitbench.compare.comparison import agrees
from splitbench.infra import intervals, parquet_io

# Below this share of the step, a link's round trips are "not felt": the latency at
# which the link adds this much is where the sensitivity curve turns flat.
FELT_ABOVE = 0.05

# The links of the write-up this tool reproduces, as it measured them: name, idle ping
# (µs, taken as the request-response latency: a TCP turn pays at least that) and
# one-way throughput A→B, B→A (Gbit/s). A run with one link predicts these.
SEED_LINKS: tuple[tuple[str, float, float, float], ...] = (
    ("5GbE", 84.0, 4.71, 4.71),
    ("USB 10GbE", 136.0, 7.28, 7.28),
    ("USB4 (TB5 cable)", 224.0, 4.38, 4.76),
)

MODEL_COLUMNS = ["pair", "model", "ctx", "baseline", "decode_ms", "decode_ms_se",
                 "round_trips", "round_trips_se", "round_trips_from", "rtt_base_us",
                 "bytes_a_to_b", "bytes_b_to_a", "wire_base_ms", "compute_ms"]


def model(summary: pd.DataFrame, links: pd.DataFrame, trips: pd.DataFrame,
          workers: dict[str, int], baseline: str | None) -> pd.DataFrame:
    """One row per pair, model and context whose baseline single-stream cell is ok: the
    measured step, the round trips it pays, the token's bytes each way and the compute
    left once the baseline link's own terms are taken out."""
    one = summary[(summary["conc"] == 1) & (summary["link"] == baseline)
                  & (summary["status"] == "ok")]
    facts = links.reindex(columns=["pair", "link", "rr64_p50_us", *traffic.LINK_FACTS])
    rows = []
    for _, cell in one.iterrows():
        link = facts[(facts["pair"] == cell["pair"]) & (facts["link"] == baseline)]
        if link.empty or not np.isfinite(number(link["rr64_p50_us"].iloc[0])):
            continue
        link = link.iloc[0]
        n, se, source = _round_trips(trips, cell["pair"], cell["model"],
                                     int(workers.get(cell["model"], 1)))
        sizes = {way: number(cell.get(f"rpc_bytes_per_token_{way}")) for way in
                 traffic.DIRECTIONS}
        wire = sum(traffic.transfer_ms(size, np.nan_to_num(number(link.get(f"burst_bytes_{way}"))),
                                       number(link.get(f"{way}_gbps")))
                   for way, size in sizes.items()
                   if np.isfinite(size) and np.isfinite(number(link.get(f"{way}_gbps"))))
        decode = number(cell["decode_ms_per_token"])
        rtt = number(link["rr64_p50_us"])
        rows.append({
            "pair": cell["pair"], "model": cell["model"], "ctx": cell["ctx"],
            "baseline": baseline, "decode_ms": decode,
            "decode_ms_se": number(cell.get("decode_ms_se")),
            "round_trips": n, "round_trips_se": se, "round_trips_from": source,
            "rtt_base_us": rtt, "bytes_a_to_b": sizes["a_to_b"],
            "bytes_b_to_a": sizes["b_to_a"], "wire_base_ms": wire,
            "compute_ms": decode - n * rtt / 1000 - wire,
        })
    return pd.DataFrame(rows, columns=MODEL_COLUMNS)


def _round_trips(trips: pd.DataFrame, pair: str, model_name: str,
                 workers: int) -> tuple[float, float, str]:
    """(round trips, standard error, where they come from) for a model's split."""
    mine = trips[(trips["pair"] == pair) & (trips["model"] == model_name)
                 & (trips["workers"] == workers)] if len(trips) else trips
    if len(mine):
        source = (mine["round_trips_from"].iloc[0] if "round_trips_from" in mine
                  else "the delay sweep")  # a frame from before the count existed
        return (float(mine["round_trips"].iloc[0]), number(mine["round_trips_se"].iloc[0]),
                str(source))
    return float(workers), np.nan, (f"assumed: the floor of one per RPC worker ({workers}); "
                                    "neither a sweep nor the cells' packets counted them")


def number(value: object) -> float:
    """A value as a finite float, or NaN (missing, None, not a number)."""
    parsed = pd.to_numeric(value, errors="coerce")
    return float(parsed) if parsed is not None and np.isfinite(parsed) else np.nan


def predict(rows: pd.DataFrame, rtt_us: float, gbps_a_to_b: float | None = None,
            gbps_b_to_a: float | None = None, burst_a_to_b: float = 0.0,
            burst_b_to_a: float = 0.0) -> pd.DataFrame:
    """Each model row's decode on a link of request-response latency `rtt_us` and rates
    `gbps_*` (B→A as A→B where not given; without rates, the baseline link's own wire
    time, so that only latency varies): ms/token and tok/s with their ± (95%
    intervals), and the latency and wire terms apart. Bytes within a burst
    allowance (a shaped link's bucket) cross at line speed, as on the measured links."""
    out = rows.copy()
    if gbps_a_to_b is None:
        wire = rows["wire_base_ms"].to_numpy(dtype=float)
    else:
        gbps_b_to_a = gbps_a_to_b if gbps_b_to_a is None else gbps_b_to_a
        wire = np.zeros(len(rows))
        for way, gbps, burst in (("a_to_b", gbps_a_to_b, burst_a_to_b),
                                 ("b_to_a", gbps_b_to_a, burst_b_to_a)):
            sizes = pd.to_numeric(rows[f"bytes_{way}"], errors="coerce").fillna(0).to_numpy()
            wire += np.array([traffic.transfer_ms(s, burst, gbps) for s in sizes])
    latency = rows["round_trips"].to_numpy(dtype=float) * rtt_us / 1000
    ms = rows["compute_ms"].to_numpy(dtype=float) + latency + wire
    # The baseline step's error moves every prediction alike; the round trips' error
    # grows with the distance from the baseline's latency.
    se = np.hypot(np.nan_to_num(rows["decode_ms_se"].to_numpy(dtype=float)),
                  np.nan_to_num(rows["round_trips_se"].to_numpy(dtype=float))
                  * np.abs(rtt_us - rows["rtt_base_us"].to_numpy(dtype=float)) / 1000)
    out["rtt_us"] = rtt_us
    out["latency_ms"] = latency
    out["wire_ms"] = wire
    out["predicted_ms"] = ms
    out["predicted_unc_ms"] = intervals.halfwidth(se, intervals.UNBOUNDED)
    out["predicted_tps"] = 1000 / ms
    out["predicted_tps_unc"] = out["predicted_tps"] * out["predicted_unc_ms"] / ms
    return out


def latency_bound(rows: pd.DataFrame, tokens_per_s: float,
                  gbps_a_to_b: float | None = None, gbps_b_to_a: float | None = None
                  ) -> pd.DataFrame:
    """Each model row's largest request-response latency (µs) at which a stream still
    decodes at `tokens_per_s`: the step it allows, less the compute and the wire time
    (at the given rates, else the baseline link's), over the round trips. `bound_us`
    NaN where no latency is slow enough to matter (no round trips) and negative where
    even no latency holds it; its ± (a 95% interval) carries the baseline
    step's and the round trips' errors."""
    out = predict(rows, 0.0, gbps_a_to_b, gbps_b_to_a)
    budget = 1000 / tokens_per_s - out["compute_ms"] - out["wire_ms"]
    trips = rows["round_trips"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = np.where(trips > 0, budget / trips * 1000, np.nan)
        se = np.hypot(np.nan_to_num(rows["decode_ms_se"].to_numpy(dtype=float)) / trips,
                      bound / 1000 * np.nan_to_num(rows["round_trips_se"].to_numpy(
                          dtype=float)) / trips) * 1000
    out["tokens_per_s"] = tokens_per_s
    out["bound_us"] = bound
    out["bound_unc_us"] = intervals.halfwidth(se, intervals.UNBOUNDED)
    return out


def at_share(rows: pd.DataFrame, levels: pd.DataFrame) -> pd.DataFrame:
    """The model's rows held to a service level's share instead of the median: each
    row's step becomes the baseline single-stream cell's step that the level's share of
    its requests stay within (service_levels' `step_at_share_ms`, with its error), and
    its compute that step less the baseline's latency and wire terms. Rows whose
    baseline cell has no such figure are left out; the level's targets ride along, and
    the cell's request count (`requests`, where the table has it), which says whether
    the share is resolved (share_resolved)."""
    wanted = levels[levels["conc"] == 1].rename(columns={"link": "baseline"})
    keys = ["pair", "model", "ctx", "baseline"]
    carried = [c for c in ("step_at_share_ms", "step_at_share_se", "ttft_at_share_ms",
                           "tokens_per_s_target", "ttft_ms_target", "share_pct",
                           "requests") if c in wanted]
    merged = rows.merge(wanted[[*keys, *carried]], on=keys, how="inner")
    merged = merged[np.isfinite(pd.to_numeric(merged["step_at_share_ms"],
                                              errors="coerce"))].copy()
    merged["decode_ms"] = merged["step_at_share_ms"]
    merged["decode_ms_se"] = merged["step_at_share_se"]
    merged["compute_ms"] = (merged["decode_ms"] - merged["round_trips"]
                            * merged["rtt_base_us"] / 1000 - merged["wire_base_ms"])
    return merged.reset_index(drop=True)


def share_resolved(requests: float, share_pct: float) -> bool | None:
    """Whether `requests` can show that `share_pct` of them stay within a step at all:
    even with every one of them within it, the share's 95% interval
    (intervals.share_interval) must reach the share, which takes
    intervals.requests_to_show of them (36 for 90%). None where the count is unknown."""
    if not np.isfinite(number(requests)) or not np.isfinite(number(share_pct)):
        return None
    n = int(requests)
    return n > 0 and intervals.share_interval(n, n)[0] >= share_pct / 100


def unresolved_lines(bounds: pd.DataFrame) -> list[str]:
    """A line per bound whose baseline share is not resolved (share_resolved): the
    step its share stays within rests on too few requests to show the share."""
    if "requests" not in bounds or "share_pct" not in bounds:
        return []
    out = []
    for _, r in bounds.iterrows():
        if share_resolved(r["requests"], r["share_pct"]) is not False:
            continue
        n, share = int(r["requests"]), float(r["share_pct"])
        low = intervals.share_interval(n, n)[0]
        out.append(f"not resolved: {r['pair']}/{r['model']}/{r['ctx']} rests on the "
                   f"baseline's {n} requests; even {n} of {n} within a step show only "
                   f"that {np.floor(100 * low + 1e-9):.0f}% stay within it (95% interval), "
                   f"not {share:g}%: about {intervals.requests_to_show(share / 100)} "
                   "requests would")
    return out


def bound_text(bounds: pd.DataFrame) -> str:
    """latency_bound's rows as a table a person reads in a terminal."""
    tps = bounds["tokens_per_s"].iloc[0]
    share = bounds["share_pct"].iloc[0] if "share_pct" in bounds else None
    who = (f"{share:g}% of one stream's requests still decode" if share is not None
           else "one stream still decodes")
    lines = [f"The largest request-response latency at which {who} {tps:g} tokens/s "
             f"(± is a 95% interval; time to first token is not predicted "
             "here):", ""]
    header = ["pair", "model", "ctx", "compute (ms/token)", "wire (ms)", "latency at most",
              "round trips from"]
    waits = "ttft_at_share_ms" in bounds and bounds["ttft_ms_target"].notna().any()
    if waits:
        header.insert(-1, f"TTFT on the baseline (p{share:g}, target)")
    body = []
    for _, r in bounds.iterrows():
        bound = r["bound_us"]
        said = ("any (no round trips)" if not np.isfinite(bound) else
                "none: compute and wire alone are slower" if bound < 0 else
                f"{bound:.0f} ±{r['bound_unc_us']:.0f} µs")
        line = [r["pair"], r["model"], r["ctx"], f"{r['compute_ms']:.3f}",
                f"{r['wire_ms']:.3f}", said,
                f"{r['round_trips']:.2f} ({r['round_trips_from']})"]
        if waits:
            line.insert(-1, f"{r['ttft_at_share_ms']:.0f} ms ({r['ttft_ms_target']:g})")
        body.append(line)
    widths = [max(len(str(x)) for x in column) for column in zip(header, *body, strict=True)]
    for line in [header, *body]:
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)))
    unresolved = unresolved_lines(bounds)
    return "\n".join([*lines, *([""] if unresolved else []), *unresolved])


def curve(rows: pd.DataFrame, rtts_us: Sequence[float]) -> pd.DataFrame:
    """predict() over a range of latencies at each row's baseline bandwidth."""
    return pd.concat([predict(rows, rtt) for rtt in rtts_us], ignore_index=True)


def felt_above_us(row: pd.Series, share: float = FELT_ABOVE) -> float:
    """The request-response latency (µs) above which the link's round trips add more
    than `share` to this row's compute step; NaN without round trips."""
    trips = row["round_trips"]
    if not (np.isfinite(trips) and trips > 0 and np.isfinite(row["compute_ms"])):
        return np.nan
    return share * row["compute_ms"] / trips * 1000


def measured_points(rows: pd.DataFrame, comparison: pd.DataFrame) -> pd.DataFrame:
    """Each measured link's single-stream decode beside its prediction, for the chart:
    x is the link's request-response latency (the baseline's plus the difference the
    comparison used: a paired cell's own rounds, else the link checks'), the measured
    decode is the baseline's step plus the measured difference with that difference's
    ± (a paired cell keeps its paired uncertainty), and the prediction is the baseline's
    step plus comparison.predicted_decode_delta. `comparison`: compare_links rows with
    the prediction's columns beside them. `off_curve` where the two disagree as the link
    comparison judges it (comparison.agrees)."""
    out = []
    for _, row in rows.iterrows():
        out.append({"pair": row["pair"], "model": row["model"], "ctx": row["ctx"],
                    "link": row["baseline"], "baseline": True, "rtt_us": row["rtt_base_us"],
                    "measured_ms": row["decode_ms"],
                    "measured_unc_ms": intervals.halfwidth(row["decode_ms_se"],
                                                           intervals.UNBOUNDED),
                    "predicted_ms": np.nan, "predicted_unc_ms": np.nan, "off_curve": None})
        mine = comparison[(comparison["pair"] == row["pair"])
                          & (comparison["model"] == row["model"])
                          & (comparison["ctx"] == row["ctx"])
                          & (comparison["status"] == "ok")
                          & (comparison["status_base"] == "ok")]
        for _, comp in mine.iterrows():
            gap_us = number(comp.get("latency_delta_us"))
            predicted = number(comp.get("predicted_decode_delta_ms"))
            predicted_unc = number(comp.get("predicted_decode_delta_unc_ms"))
            measured, unc = comp["decode_delta_ms"], comp["decode_delta_unc_ms"]
            agree = agrees(measured, unc, predicted, predicted_unc)
            out.append({"pair": row["pair"], "model": row["model"], "ctx": row["ctx"],
                        "link": comp["link"], "baseline": False,
                        "rtt_us": row["rtt_base_us"] + gap_us,
                        "measured_ms": row["decode_ms"] + measured, "measured_unc_ms": unc,
                        "predicted_ms": row["decode_ms"] + predicted,
                        "predicted_unc_ms": predicted_unc,
                        "off_curve": None if agree is None else not agree})
    points = pd.DataFrame(out, columns=["pair", "model", "ctx", "link", "baseline", "rtt_us",
                                        "measured_ms", "measured_unc_ms", "predicted_ms",
                                        "predicted_unc_ms", "off_curve"])
    points["measured_tps"] = 1000 / points["measured_ms"]
    points["measured_tps_unc"] = (points["measured_tps"] * points["measured_unc_ms"]
                                  / points["measured_ms"])
    return points


def write(rows: pd.DataFrame, points: pd.DataFrame, out: str | Path,
          points_out: str | Path) -> None:
    """The decode model (results.WHATIF) and each measured link's point beside it
    (results.WHATIF_POINTS), for the chart and the `whatif` command."""
    for frame, path in ((rows, out), (points, points_out)):
        parquet_io.write(frame, path, {"rows": len(frame)})


def text(predicted: pd.DataFrame, rtt: float, a_to_b: float, b_to_a: float | None) -> str:
    """The prediction as a table a person reads in a terminal."""
    rates = f"{a_to_b:g} Gbit/s" + (f" A→B, {b_to_a:g} B→A" if b_to_a is not None else "")
    lines = [f"Decode on a link of {rtt:g} µs request-response latency and {rates} "
             "(± is a 95% interval):", ""]
    header = ["pair", "model", "ctx", "measured on baseline", "predicted ms/token",
              "tok/s", "latency + wire (ms)", "round trips from"]
    body = [[r["pair"], r["model"], r["ctx"], f"{r['decode_ms']:.3f} ms",
             f"{r['predicted_ms']:.3f} ±{r['predicted_unc_ms']:.3f}",
             f"{r['predicted_tps']:.1f} ±{r['predicted_tps_unc']:.1f}",
             f"{r['latency_ms']:.3f} + {r['wire_ms']:.3f}",
             f"{r['round_trips']:.2f} ({r['round_trips_from']})"]
            for _, r in predicted.iterrows()]
    widths = [max(len(str(x)) for x in column) for column in zip(header, *body, strict=True)]
    for line in [header, *body]:
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)))
    return "\n".join(lines)

