"""What a link costs against the baseline link, with an uncertainty that includes how
much the machine itself varied, and the difference physics predicts.

Three sources of the decode and prefill differences, best first:

paired      the cell alternated round by round with the baseline link (cells.run,
            `cell.paired`): each round's difference is taken between requests measured
            seconds apart on the same machine; their spread is the uncertainty.
sequential  the link's cell and the baseline's cell were measured at different times:
            each cell's own uncertainty, plus the variation of the machine over time,
            which every repeat of the drift anchors' cell measures (`machine_drift`).
            Without repeats that term is unknown and the uncertainty is marked as a
            lower bound.

The prediction: a decode step pays the link's request-response latency once per
blocking round trip (`roundtrips`: measured by sweeping delay), and its bytes at the
link's throughput (`traffic`), so a link should cost
`round trips per token x (its 64 B request-response p50 - the baseline's)` plus
`its transfer time for the token's bytes - the baseline's` per token.
A paired cell measures both links' latency in its own rounds, right after each run's
requests: the difference of those, with their spread. Otherwise the link checks' figures,
measured minutes before the cells: then the machine's drift (`machine_drift`) is part of
the uncertainty. A measured difference that disagrees with it beyond their
combined uncertainty is flagged; so is any link that decodes faster than the
baseline beyond its uncertainty, which no emulated link can.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from splitbench.cells import sweep_fit
from splitbench.compare import traffic
from splitbench.contracts import results
from splitbench.contracts.slices import InterferenceLimits
from splitbench.infra import intervals
from splitbench.summary import between_runs
from splitbench.summary.cell_summary import pick_baseline
from splitbench.summary.paired import PAIRED_COLUMNS

# Cells that a link comparison sets side by side: same pair, model and context.
COMPARE_KEYS = ["pair", "model", "ctx"]

KEYS = results.CELL_KEYS
# A threshold, not a ±: two figures' difference "grows" or "differs" only beyond this
# many times their combined 95% ± (a run judges several links and contexts at once;
# docs/method.md, "Thresholds").
AGREEMENT_SIGMAS = 1.5


def agrees(measured: float, unc: float, predicted: float, predicted_unc: float
           ) -> bool | None:
    """Whether a measured figure agrees with its prediction within their combined ±
    (`prediction_allowance`; the prediction's ± holds the model's own error as the
    project's A/A runs measured it, so a bias the model always has does not flag a
    quiet run); None where either figure or the measurement's ± is unknown."""
    if not all(np.isfinite(v) for v in (measured, unc, predicted)):
        return None
    return bool(abs(measured - predicted) <= prediction_allowance(unc, predicted_unc))


def prediction_allowance(unc: float, predicted_unc: float) -> float:
    """The largest gap between a measurement and its prediction that still agrees: their
    combined ± (an unknown prediction ± counts as 0)."""
    return float(np.hypot(unc, np.nan_to_num(predicted_unc)))


def host_a_change(row: Any) -> tuple[float, float] | None:
    """How much host A's own time per token changed on the link against the baseline
    (µs and its ±, from a paired cell's packets: a_time_ms), where that is resolved
    (outside its ±); None where not measured or not resolved."""
    values = [pd.to_numeric(row.get(c), errors="coerce")
              for c in ("a_time_delta_us", "a_time_delta_unc_us")]
    if not all(np.isfinite(v) for v in values) or abs(values[0]) <= values[1]:
        return None
    return float(values[0]), float(values[1])


def agreement_allowance(unc: float, other_unc: float) -> float:
    """The threshold beyond which two figures differ ("grows", "differs"): AGREEMENT_SIGMAS
    times their combined ±."""
    return float(np.hypot(unc, np.nan_to_num(other_unc))) * AGREEMENT_SIGMAS


def machine_drift(anchor_files: Sequence[str], summary: pd.DataFrame,
                  baseline: str | None) -> pd.DataFrame:
    """Per (pair, model): how much one cell's figure varies with the machine's state over
    the run, as a relative standard deviation, for decode and prefill.

    Every measurement of the drift anchors' cell (the baseline link, the shortest
    context, one stream) is a repeat of the same cell at another time: the start and end
    anchors, the baseline's own cell, and the baseline measured alongside each paired
    cell of that context. Their spread is the machine's drift; NaN with fewer than two.
    """
    values: dict[tuple[str, str], dict[str, list[float]]] = {}

    def add(pair: str, model: str, decode: Any, prefill: Any) -> None:
        mine = values.setdefault((pair, model), {"decode": [], "prefill": []})
        # A summary read back from Parquet holds a column of no paired cells as None.
        decode, prefill = (pd.to_numeric(decode, errors="coerce"),
                           pd.to_numeric(prefill, errors="coerce"))
        if np.isfinite(decode) and decode > 0:
            mine["decode"].append(float(decode))
        if np.isfinite(prefill) and prefill > 0:
            mine["prefill"].append(float(prefill))

    for path in anchor_files:
        rows = results.with_identity(pq.read_table(path).to_pandas(), path, ["pair", "model"])
        medians = _anchor_medians(rows)
        if medians is not None:
            add(rows["pair"].iloc[0], rows["model"].iloc[0], medians["decode"],
                medians["prefill"])
    ok = summary[(summary["conc"] == 1) & (summary["status"] == "ok")]
    if len(ok) and "ctx_tokens" in ok:
        shortest = ok.loc[ok["ctx_tokens"] == ok["ctx_tokens"].min()]
        for row in shortest.itertuples(index=False):
            if row.link == baseline:
                add(row.pair, row.model, row.decode_ms_per_token, row.prefill_tps)
            elif np.isfinite(pd.to_numeric(getattr(row, "paired_reference_decode_ms", None),
                                           errors="coerce")):
                add(row.pair, row.model, row.paired_reference_decode_ms,
                    getattr(row, "paired_reference_prefill_tps", np.nan))
    rows = []
    for (pair, model), found in values.items():
        row = {"pair": pair, "model": model, "drift_samples": len(found["decode"])}
        for figure in ("decode", "prefill"):
            v = np.array(found[figure])
            row[f"drift_{figure}_rel"] = float(v.std(ddof=1) / v.mean()) if len(v) >= 2 \
                else np.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=["pair", "model", "drift_decode_rel",
                                       "drift_prefill_rel", "drift_samples"])


def _anchor_medians(requests: pd.DataFrame | None) -> dict[str, float] | None:
    if requests is None or "status" not in requests:
        return None
    ok = requests[requests["status"] == "ok"]
    decode = pd.to_numeric(ok.get("decode_ms_per_token"), errors="coerce").median()
    prefill = pd.to_numeric(ok.get("prefill_tps"), errors="coerce").median()
    if not (np.isfinite(decode) and decode > 0 and np.isfinite(prefill) and prefill > 0):
        return None
    return {"decode": float(decode), "prefill": float(prefill)}


TRIPS_COLUMNS = ["pair", "model", "workers", "round_trips", "round_trips_se",
                 "round_trips_dof", "round_trips_from", "turns_counted", *sweep_fit.NO_SPLIT,
                 "flags"]
SWEEP, COUNTED = "the delay sweep", "counted from the RPC packets"
FLOOR = "assumed: the floor of one per RPC worker, nothing measured them"


def round_trips(sweep_files: Sequence[str], summary: pd.DataFrame | None = None,
                limits: InterferenceLimits | None = None) -> pd.DataFrame:
    """Per (pair, model, workers): the round trips per decoded token, its standard
    error, where it comes from and a sweep's `flags` (sweep_fit.flags, with the
    interference `limits`; a count's cells carry their own). From the round-trip
    sweeps whose figure is resolvable (a sweep that is not has no row); where no sweep
    resolved it, from the request-response turns counted in the cells' own RPC packets
    (`rpc_turns_per_token`: the pair's ok single-stream cells of that model), which
    needs no delay and works on any pair. Neither: no row, and nothing is predicted
    from a guess here."""
    rows = []
    for path in sweep_files:
        frame = pd.read_parquet(path)
        if frame.empty:
            continue
        fit = sweep_fit.fit(frame)  # the sweep's own fit: one estimator
        if fit["not_resolvable"]:
            continue  # no prediction from a sweep that could not count (its table says why)
        first = frame.iloc[0]
        rows.append({"pair": first["pair"], "model": first["model"],
                     "workers": int(first["workers"]),
                     "round_trips": fit["round_trips_per_token"],
                     "round_trips_se": fit.get("round_trips_se"),
                     "round_trips_dof": fit.get("round_trips_dof"), "round_trips_from": SWEEP,
                     # The same sweep's requests, their turns counted from the packets.
                     "turns_counted": fit.get("turns_per_token"),
                     # Its slope split by the packets: the turns' waits and host A's own.
                     **{k: fit.get(k) for k in sweep_fit.NO_SPLIT},
                     "flags": sweep_fit.flags(frame, limits)})
    swept = {(r["pair"], r["model"], r["workers"]) for r in rows}
    rows = [_across_runs(row, summary) for row in rows]
    rows += [row for row in _counted(summary) if
             (row["pair"], row["model"], row["workers"]) not in swept]
    return pd.DataFrame(rows, columns=TRIPS_COLUMNS)


def _across_runs(row: dict, summary: pd.DataFrame | None) -> dict:
    """A swept count's standard error with the sweep slope's run-to-run variation where
    its pair has a calibration (between_runs: its A/A runs' slopes varied more than one
    sweep's fit says; the count is what another run would also find)."""
    column = between_runs.PREDICTION["slope_rel_sd"]
    if summary is None or column not in summary or row["round_trips_se"] is None:
        return row
    mine = summary[summary["pair"] == row["pair"]]
    rel = pd.to_numeric(mine[column], errors="coerce").dropna()
    if rel.empty:
        return row
    dof = pd.to_numeric(mine.get(between_runs.CALIBRATION_DOF), errors="coerce").dropna()
    se, total_dof = intervals.combined(
        [row["round_trips_se"], float(rel.iloc[0]) * abs(row["round_trips"])],
        [row["round_trips_dof"], float(dof.iloc[0]) if len(dof) else intervals.UNBOUNDED])
    return {**row, "round_trips_se": se, "round_trips_dof": total_dof}


def _counted(summary: pd.DataFrame | None) -> list[dict]:
    """Round trips per token counted in the cells: the median over a (pair, model,
    workers)'s ok single-stream cells, with its standard error."""
    needed = {"rpc_turns_per_token", "rpc_workers", "conc", "status"}
    if summary is None or not needed <= set(summary.columns):
        return []
    one = summary[(summary["conc"] == 1) & (summary["status"] == "ok")].copy()
    one["turns"] = pd.to_numeric(one["rpc_turns_per_token"], errors="coerce")
    one = one[np.isfinite(one["turns"]) & one["rpc_workers"].notna()]
    rows = []
    for (pair, model, workers), cells in one.groupby(["pair", "model", "rpc_workers"]):
        turns = cells["turns"]
        se = intervals.median_se(turns)[0]
        rows.append({"pair": pair, "model": model, "workers": int(workers),
                     "round_trips": float(turns.median()), "round_trips_se": se,
                     "round_trips_dof": len(turns) - 1,
                     "round_trips_from": COUNTED, "turns_counted": float(turns.median()),
                     "flags": None})
    return rows


# Where a prediction's latency difference was measured (predicted_decode_delta).
LATENCY_FROM_PROBE = "the probe in the cell's rounds"
LATENCY_FROM_LINKS = "the link checks' probe"


def predicted_decode_delta(comp: pd.DataFrame, links: pd.DataFrame, trips: pd.DataFrame,
                           workers: dict[str, int],
                           drift: pd.DataFrame | None = None) -> pd.DataFrame:
    """For each row of a link comparison (pair, link, baseline, model): the decode
    difference predicted from the links' latency difference and the model's measured
    round trips per token, plus the bandwidth term, and its uncertainty (a 95%
    interval: the round trips', the run-to-run variation of the sweep's slope and the
    model's own error where the pair has a calibration (between_runs), and, where
    `drift` (machine_drift) is known, the machine's drift between when the latency and
    the cell were measured). The latency
    difference is the 64 B probe's in the paired cell's own rounds, else the link
    checks' (`latency_from` says which); beside it, what the paired cell's decode turns
    waited more on the link (`turn_wait_delta_us`, from the packets), a witness and not
    the figure, and how much host A's own time per token changed (`a_time_delta_us`,
    a_time_ms: what no latency term holds). NaN where no latency was measured; where the round
    trips were not, the floor of one per worker, named as assumed in
    `round_trips_from`."""
    rows = _with_round_trips(comp, links, trips, workers, drift)
    delta_ms, predicted, spread, source = _latency_term(rows, comp)
    # From the paired cell's packets, beside the prediction (none without a paired cell).
    packets = {column: pd.to_numeric(comp[column]).to_numpy() if column in comp else
               np.full(len(comp), np.nan)
               for column in ("paired_turn_wait_delta_us", "paired_turn_wait_delta_se",
                              "paired_a_time_delta_us", "paired_a_time_delta_se",
                              "paired_rounds")}
    rounds = packets["paired_rounds"].astype(float)
    # The bandwidth term: the token's bytes above each link's burst at its throughput.
    bandwidth = traffic.bandwidth_delta(comp, links)
    # The model's own error, as the project's A/A runs measured it (between_runs): the
    # model leaves out what else a link changes (host A's own time). (The sweep slope's
    # run-to-run variation is in the round trips' standard error: round_trips.)
    model_error = _calibrated(comp, "calibration_model_error_ms")
    spread = np.hypot(spread.to_numpy(), model_error)
    latency_ms, latency_unc = predicted.to_numpy(), intervals.halfwidth(
        np.asarray(spread), intervals.UNBOUNDED)
    # Unknown (no bytes or throughput measured): latency alone, which the text says.
    total = latency_ms + bandwidth["bandwidth_ms"].fillna(0).to_numpy()
    spread = np.hypot(spread, intervals.as_se(bandwidth["bandwidth_unc_ms"].fillna(0)
                                              .to_numpy()))
    return pd.DataFrame({
        "predicted_decode_delta_ms": total,
        "predicted_decode_delta_unc_ms": intervals.halfwidth(spread, intervals.UNBOUNDED),
        "predicted_latency_ms": latency_ms,
        "predicted_latency_unc_ms": latency_unc,
        "predicted_bandwidth_ms": bandwidth["bandwidth_ms"].to_numpy(),
        "predicted_bandwidth_unc_ms": bandwidth["bandwidth_unc_ms"].to_numpy(),
        "round_trips": pd.to_numeric(rows["round_trips"]).to_numpy(),
        "round_trips_from": rows["round_trips_from"].to_numpy(),
        # The latency difference the prediction used, and where it was measured.
        "latency_delta_us": 1000 * np.asarray(delta_ms, dtype=float),
        "latency_from": source.to_numpy(),
        # The witness beside it: what the decode turns waited more on the link.
        "turn_wait_delta_us": packets["paired_turn_wait_delta_us"],
        "turn_wait_delta_unc_us": intervals.halfwidth(packets["paired_turn_wait_delta_se"],
                                                      rounds - 1),
        # And what host A's own time per token changed by (a latency term has none).
        "a_time_delta_us": packets["paired_a_time_delta_us"],
        "a_time_delta_unc_us": intervals.halfwidth(packets["paired_a_time_delta_se"],
                                                   rounds - 1),
    }, index=comp.index)


def _calibrated(comp: pd.DataFrame, column: str) -> np.ndarray:
    """A calibration term of each comparison row's pair (0 where it has none)."""
    if column not in comp:
        return np.zeros(len(comp))
    return pd.to_numeric(comp[column], errors="coerce").fillna(0.0).to_numpy(float)


def _with_round_trips(comp: pd.DataFrame, links: pd.DataFrame, trips: pd.DataFrame,
                      workers: dict[str, int], drift: pd.DataFrame | None) -> pd.DataFrame:
    """Per comparison row: both links' probe latency, the model's round trips (the
    floor of one per worker where nothing measured them, said to be assumed) and the
    machine's drift."""
    latency = links.reindex(columns=["pair", "link", "rr64_p50_us"]).rename(
        columns={"rr64_p50_us": "rr64_us"})
    rows = comp[["pair", "link", "baseline", "model"]].copy()
    rows["workers"] = rows["model"].map(workers).fillna(1).astype(int)
    rows = rows.merge(latency, on=["pair", "link"], how="left").merge(
        latency.rename(columns={"link": "baseline", "rr64_us": "rr64_base_us"}),
        on=["pair", "baseline"], how="left").merge(trips, on=["pair", "model", "workers"],
                                                   how="left")
    if drift is not None and len(drift):
        rows = rows.merge(drift[["pair", "model", "drift_decode_rel"]],
                          on=["pair", "model"], how="left")
    else:
        rows["drift_decode_rel"] = np.nan
    # Where nothing measured the round trips: the protocol's floor, one per worker, said
    # to be assumed wherever it is used (the latency term then is a lower bound).
    assumed = pd.to_numeric(rows["round_trips"]).isna()
    rows["round_trips"] = pd.to_numeric(rows["round_trips"]).where(~assumed, rows["workers"])
    rows["round_trips_se"] = pd.to_numeric(rows["round_trips_se"]).where(~assumed, 0.0)
    source = rows.get("round_trips_from", SWEEP)
    rows["round_trips_from"] = pd.Series(source, index=rows.index).where(~assumed, FLOOR)
    return rows


def _latency_term(rows: pd.DataFrame, comp: pd.DataFrame
                  ) -> tuple[pd.Series, pd.Series, pd.Series, pd.Series]:
    """The latency difference (ms), the term it predicts (round trips x it), that term's
    standard error and where the difference was measured: the paired cell's own probe
    rounds where it has them, else the link checks'."""
    trips_n = pd.to_numeric(rows["round_trips"])
    trips_se = pd.to_numeric(rows["round_trips_se"])
    # Latency from the link checks, minutes before the cells: the machine's drift.
    delta_ms = (pd.to_numeric(rows["rr64_us"]) - pd.to_numeric(rows["rr64_base_us"])) / 1000
    predicted = trips_n * delta_ms
    spread = np.hypot(trips_se * delta_ms.abs(),
                      pd.to_numeric(rows["drift_decode_rel"]).fillna(0) * predicted.abs())
    source = pd.Series(LATENCY_FROM_LINKS, index=rows.index).where(delta_ms.notna(), None)
    # A paired cell measured both links' latency in its own rounds: that, with its
    # spread. (What its decode turns waited, from the packets, is a witness beside it,
    # not the prediction's figure: it holds B's own work on each message, whose spread
    # on a real model is milliseconds: SmolLM2's ±1.1 ms against the probe's µs.)
    if "paired_rr64_delta_us" in comp:
        paired_ms = pd.to_numeric(comp["paired_rr64_delta_us"]).to_numpy() / 1000
        paired_se = pd.to_numeric(comp["paired_rr64_delta_se"]).to_numpy() / 1000
        has = np.isfinite(paired_ms)
        delta_ms = delta_ms.where(~has, paired_ms)
        predicted = trips_n * delta_ms
        spread = spread.where(~has, np.hypot(trips_se * delta_ms.abs(), trips_n * paired_se))
        source = source.where(~has, LATENCY_FROM_PROBE)
    return delta_ms, predicted, spread, source


def run_comparison(summary: pd.DataFrame, links: pd.DataFrame,
                   baseline_link: str | None, drift: pd.DataFrame | None,
                   trips: pd.DataFrame, workers: dict[str, int]) -> pd.DataFrame:
    """The run's one link comparison (results/summary/comparison.parquet): every link's
    single-stream cells against the baseline's (compare_links), each row with the decode
    difference predicted from the links' measured latency and bandwidth beside it
    (predicted_decode_delta). The stages after it read this file and compute none."""
    comp = compare_links(summary, baseline_link, drift)
    if len(comp):
        comp = pd.concat([comp, predicted_decode_delta(comp, links, trips, workers, drift)],
                         axis=1)
    return comp


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
    uncertainty is a lower bound (`*_lower_bound`). Uncertainties are 95% intervals
    errors; `*_resolvable` is NA where unknown or only a lower bound is exceeded, else
    whether the difference lies outside the uncertainty (never guessed).
    """
    base_name = pick_baseline(summary, baseline_link)
    one = summary[summary["conc"] == 1]
    paired = PAIRED_COLUMNS
    columns = ["status", "prefill_tps", "prefill_tps_se", "decode_ms_per_token",
               "decode_ms_se", "decode_tps", "ttft_ms", "uncertainty_from", "flags", "samples",
               "calibration_slope_rel_sd", "calibration_model_error_ms", "paired_decode_unc",
               *between_runs.SEQUENTIAL.values(), between_runs.SEQUENTIAL_DOF,
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
    """Differences of two cells measured at different times: a 95% interval at the
    Welch-Satterthwaite degrees of freedom of the two cells' own terms and the machine's
    variation over time. That variation is the pair's calibrated run-to-run term of the
    difference itself where it has one (between_runs.SEQUENTIAL: measured on A/A runs),
    else the anchors' drift, once for each cell (wider: it counts the run's pace twice,
    where the two cells share much of it)."""
    ratio = comp["prefill_tps"] / comp["prefill_tps_base"]
    comp["prefill_change_pct"] = (ratio - 1) * 100
    drift_p = pd.to_numeric(comp["drift_prefill_rel"], errors="coerce")
    drift_d = pd.to_numeric(comp["drift_decode_rel"], errors="coerce")
    calibrated_d, calibrated_p, calibrated_dof = (
        pd.to_numeric(comp[c], errors="coerce") for c in
        [*between_runs.SEQUENTIAL.values(), between_runs.SEQUENTIAL_DOF])
    own_a, own_b, drift_dof, _ = _dofs(comp)
    by_calibration = calibrated_d.notna()
    term_dof = np.where(by_calibration, calibrated_dof.fillna(1), drift_dof)
    rel_se = [comp["prefill_tps_se"] / comp["prefill_tps"],
              comp["prefill_tps_se_base"] / comp["prefill_tps_base"]]
    prefill_se, prefill_dof = intervals.combined(
        [*rel_se, np.where(by_calibration, calibrated_p / ratio, drift_p.fillna(0)),
         np.where(by_calibration, 0.0, drift_p.fillna(0))],
        [own_a, own_b, term_dof, term_dof])
    comp["prefill_change_unc_pct"] = 100 * ratio * intervals.halfwidth(prefill_se,
                                                                        prefill_dof)
    comp["decode_delta_ms"] = comp["decode_ms_per_token"] - comp["decode_ms_per_token_base"]
    decode_se, decode_dof = intervals.combined(
        [comp["decode_ms_se"], comp["decode_ms_se_base"],
         np.where(by_calibration, calibrated_d * comp["decode_ms_per_token_base"],
                  drift_d.fillna(0) * comp["decode_ms_per_token"]),
         np.where(by_calibration, 0.0, drift_d.fillna(0) * comp["decode_ms_per_token_base"])],
        [own_a, own_b, term_dof, term_dof])
    comp["decode_delta_unc_ms"] = intervals.halfwidth(decode_se, decode_dof)
    one_request = comp["uncertainty_from"].eq("tokens") | comp["uncertainty_from_base"].eq(
        "tokens")
    comp["decode_lower_bound"] = (drift_d.isna() & ~by_calibration) | one_request
    comp["prefill_lower_bound"] = drift_p.isna() & calibrated_p.isna()
    comp["compared"] = np.select(
        [by_calibration, drift_d.notna()],
        ["sequential (run-to-run variation included)", "sequential (machine drift included)"],
        "sequential (no drift measured)")


def _dofs(comp: pd.DataFrame) -> tuple[Any, Any, Any, Any]:
    """The degrees of freedom of a sequential difference's four terms: each cell's own
    (its samples less one; a one-pass floor from its tokens counts as unbounded) and
    the drift's (its anchors' measurements less one), twice."""
    def own(column: str) -> Any:
        n = pd.to_numeric(comp.get(column, pd.Series(np.nan, index=comp.index)),
                          errors="coerce").to_numpy(float)
        return np.where(n >= 2, n - 1, intervals.UNBOUNDED)

    drift = pd.to_numeric(comp.get("drift_samples", pd.Series(np.nan, index=comp.index)),
                          errors="coerce").to_numpy(float)
    drift = np.where(drift >= 2, drift - 1, intervals.UNBOUNDED)
    return own("samples"), own("samples_base"), drift, drift


def _paired(comp: pd.DataFrame) -> None:
    """Cells measured round by round against the baseline: their paired differences."""
    has = comp["paired_decode_delta_ms"].notna()
    if not has.any():
        return
    comp.loc[has, "decode_delta_ms"] = comp.loc[has, "paired_decode_delta_ms"]
    dof = comp.loc[has, "paired_rounds"].to_numpy(float) - 1
    own = intervals.halfwidth(comp.loc[has, "paired_decode_delta_se"].to_numpy(float), dof)
    # With the run-to-run term where the pair has one (between_runs), else the rounds'.
    calibrated = pd.to_numeric(comp.loc[has, "paired_decode_unc"], errors="coerce") \
        .to_numpy(float) if "paired_decode_unc" in comp else np.full(has.sum(), np.nan)
    comp.loc[has, "decode_delta_unc_ms"] = np.where(np.isfinite(calibrated), calibrated, own)
    comp.loc[has, "prefill_change_pct"] = comp.loc[has, "paired_prefill_change_pct"]
    comp.loc[has, "prefill_change_unc_pct"] = intervals.halfwidth(
        comp.loc[has, "paired_prefill_change_se"].to_numpy(float), dof)
    comp.loc[has, "decode_ms_per_token_base"] = comp.loc[has, "paired_reference_decode_ms"]
    comp.loc[has, "prefill_tps_base"] = comp.loc[has, "paired_reference_prefill_tps"]
    comp.loc[has, ["decode_lower_bound", "prefill_lower_bound"]] = False
    comp.loc[has, "compared"] = [f"paired ({n:.0f} rounds)"
                                 for n in comp.loc[has, "paired_rounds"]]
