"""Does each ± cover what it says? Runs one config K times on the lab (A/A runs: same
code, same machine) and counts, per kind of figure, how often each run's ± holds the
mean of the other runs' figures (leave-one-out), and the ratio of the spread across runs
to the median ±.

    .venv/bin/python benchmarks/coverage.py --runs 6            # measure 6 runs, then analyse
    .venv/bin/python benchmarks/coverage.py --analyse           # the runs already under --work
    .venv/bin/python benchmarks/coverage.py --analyse --calibrate   # and write the calibration

Each run is the workflow in a scratch copy under --work (default /tmp/sb-coverage),
`snakemake --cores 1 all`; a run whose report exists is kept. The analysis re-reads every
run's request files with the code as it is now, so a change to how a ± is computed is
measured again without measuring again.

The run-to-run term a cell's ± carries (summary/between_runs.py) comes from the same
kind of runs: here it is calibrated leave-one-out too (from the runs other than the one
checked), so that no run is checked against a term it helped to make. `--calibrate`
writes the term from all the runs to config/between_runs.yaml.

A ± of 95% holds the mean of the others a little less often than 95% even when it is
exactly right (that mean has its own spread): about 93% at 6 runs. The spread is 1.96
standard deviations of a figure across runs (each run's difference from the others'
mean, rescaled by sqrt((K - 1) / K)); a ratio near 1 says the ± is as wide as the runs
vary, below 0.7 too wide, above 1.4 too narrow.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from splitbench.compare import comparison  # noqa: E402
from splitbench.infra import intervals  # noqa: E402
from splitbench.summary import (  # noqa: E402
    between_runs,
    cell_summary,
    percentiles,
    service_levels,
)

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
CALIBRATION = ROOT / "config" / "between_runs.yaml"
KEYS = ["pair", "link", "model", "ctx", "conc"]


def workflow_copy(work: Path, config: Path) -> None:
    """The workflow in `work` (its results never touch the checkout's), with `config`."""
    work.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "Snakefile", work)
    for folder in ("rules", "config", "profiles", "envs", "report"):
        if (ROOT / folder).exists():
            shutil.copytree(ROOT / folder, work / folder, dirs_exist_ok=True)
    shutil.copy(config, work / "config" / "config.yaml")


def measure(work: Path, runs: int, config: Path) -> None:
    """Each run not yet complete, one after another."""
    for k in range(runs):
        run = work / f"run-{k}"
        if (run / "results" / "report.html").exists():
            print(f"run {k}: kept ({run})")
            continue
        workflow_copy(run, config)
        start = time.monotonic()
        done = subprocess.run([SNAKEMAKE, "--cores", "1", "all"], cwd=run,
                              capture_output=True, text=True)
        (run / "snakemake.log").write_text(done.stdout + done.stderr)
        print(f"run {k}: snakemake exit {done.returncode} in "
              f"{time.monotonic() - start:.0f} s ({run})", flush=True)


# --- one run's figures --------------------------------------------------------------------
def run_figures(run: Path) -> dict[str, pd.DataFrame]:
    """One run's summary (re-made from its request files), percentiles, service
    levels, sweeps and what the prediction needs."""
    config = yaml.safe_load((run / "config" / "config.yaml").read_text())
    res = run / "results"
    requests = sorted(str(p) for p in (res / "cells").rglob("*.requests.parquet"))
    summary = cell_summary.summarize(requests, config["contexts"])
    anchors = sorted(str(p) for p in (res / "anchors").rglob("*.parquet"))
    sweeps = sorted(str(p) for p in (res / "roundtrips").rglob("w*.parquet"))
    links = cell_summary.read_links(sorted(str(p) for p in (res / "links").rglob("*.parquet")))
    return {"summary": summary, "requests": requests, "anchors": anchors, "sweeps": sweeps,
            "links": links, "config": config,
            "percentiles": percentiles.table(requests),
            "levels": service_levels.table(requests, config.get("slo"))}


# --- the calibration ----------------------------------------------------------------------
def calibrate(runs: list[dict]) -> dict:
    """The run-to-run terms from several runs' figures: per cell of the matrix and figure
    (its p99s too), the standard deviation across runs less the part each run's own
    standard error holds, relative to the figure (overlap: absolute); per figure and
    kind of cell the same pooled over the cells (root mean square), for cells the runs
    did not measure; the prediction's sweep slope variation and model error."""
    stacked = pd.concat([r["summary"].assign(run=i) for i, r in enumerate(runs)],
                        ignore_index=True)
    stacked = stacked[stacked["status"] == "ok"]
    cells: dict[str, dict[str, float]] = {}
    pooled: dict[str, dict[str, list[float]]] = {}
    for key, cell in stacked.groupby(KEYS):
        name = "/".join(str(k) for k in key)
        for figure, (value, se, scale) in between_runs.FIGURES.items():
            term = _excess(cell[value], cell[se], scale == "absolute")
            if term is not None:
                cells.setdefault(name, {})[figure] = round(term, 5)
                kind = between_runs.kind_of(key[-1])
                for group in (kind, f"{kind}/{key[3]}"):  # every context, and its own
                    pooled.setdefault(figure, {}).setdefault(group, []).append(term)
    for key, figure, term in _sequential_terms(runs):
        cells.setdefault(key, {})[figure] = round(term, 5)
        ctx = key.split("/")[3]
        for group in ("single", f"single/{ctx}"):
            pooled.setdefault(figure, {}).setdefault(group, []).append(term)
    dist = pd.concat([r["percentiles"].assign(run=i) for i, r in enumerate(runs)],
                     ignore_index=True)
    dist = dist[~dist["p99_too_few"].fillna(False).astype(bool)]
    for key, cell in dist.groupby([*KEYS, "metric"]):
        term = _excess(cell["p99"], cell["p99_se"], False)
        if term is not None:
            cells.setdefault("/".join(str(k) for k in key[:-1]), {})[f"{key[-1]}_p99"] = \
                round(term, 5)
    figures = {figure: {kind: round(float(np.sqrt(np.mean(np.square(t)))), 5)
                        for kind, t in kinds.items()} for figure, kinds in pooled.items()}
    return {"mode": "embedded", "runs": len(runs), "pace": between_runs.pace_of(stacked, KEYS),
            "measured": datetime.date.today().isoformat(),
            "machine": f"{os.cpu_count()} cores, {platform.machine()}",
            "cell_dof": len(runs) - 1,
            "dof": max(1, max((len(t) for k in pooled.values() for t in k.values()),
                              default=1) * (len(runs) - 1)),
            "figures": figures, "cells": cells, "prediction": _prediction_terms(runs)}


def pooled(earlier: dict, later: dict) -> dict:
    """Two calibrations of the same kind of pair as one: each term's variance averaged
    over the batches, weighted by its degrees of freedom (a term one batch lacks is the
    other's). A batch is a set of runs measured together: the machine's pace varies
    between batches too (three runs on another afternoon spread their prefill 1.6 times
    the first batch's term), and a term from one batch is that batch's."""
    def mean_square(a: float | None, wa: float, b: float | None, wb: float) -> float:
        if a is None or b is None:
            return float(b if a is None else a)
        return round(float(np.sqrt((wa * a ** 2 + wb * b ** 2) / (wa + wb))), 5)

    ca, cb = earlier["cell_dof"], later["cell_dof"]
    cells = {name: {figure: mean_square(earlier["cells"].get(name, {}).get(figure), ca,
                                        later["cells"].get(name, {}).get(figure), cb)
                    for figure in {**earlier["cells"].get(name, {}),
                                   **later["cells"].get(name, {})}}
             for name in {**earlier["cells"], **later["cells"]}}
    da, db = earlier["dof"], later["dof"]
    figures = {figure: {kind: mean_square(earlier["figures"].get(figure, {}).get(kind), da,
                                          later["figures"].get(figure, {}).get(kind), db)
                        for kind in {**earlier["figures"].get(figure, {}),
                                     **later["figures"].get(figure, {})}}
               for figure in {**earlier["figures"], **later["figures"]}}
    prediction = {name: mean_square(earlier["prediction"].get(name), ca,
                                    later["prediction"].get(name), cb)
                  for name in {**earlier["prediction"], **later["prediction"]}}
    batches = [*earlier.get("batches", [_batch(earlier)]), *later.get("batches",
                                                                     [_batch(later)])]
    return {"mode": later["mode"], "runs": earlier["runs"] + later["runs"],
            "pace": between_runs.pooled_pace(earlier, later),
            "measured": later["measured"], "machine": later["machine"],
            "batches": batches, "cell_dof": ca + cb, "dof": da + db,
            "figures": _sorted(figures), "cells": _sorted(cells), "prediction": prediction}


def _batch(calibration: dict) -> dict:
    return {"measured": calibration["measured"], "runs": calibration["runs"]}


def _sorted(terms: dict) -> dict:
    return {k: dict(sorted(v.items())) for k, v in sorted(terms.items())}


def _sequential_terms(runs: list[dict]) -> list[tuple[str, str, float]]:
    """Per link cell compared in blocks apart from the baseline's: the run-to-run term
    of the difference itself (between_runs.SEQUENTIAL), beyond the two cells' own
    standard errors: decode's and prefill's, each as a fraction of the baseline's."""
    rows = []
    for i, run in enumerate(runs):
        summary = run["summary"]
        base = cell_summary.pick_baseline(summary, run["config"].get("baseline_link"))
        comp = comparison.compare_links(summary, base, None)
        comp = comp[comp["paired_decode_delta_ms"].isna() & comp["decode_delta_ms"].notna()]
        if comp.empty:  # every cost paired
            continue
        ratio = comp["prefill_tps"] / comp["prefill_tps_base"]
        rows.append(pd.DataFrame({
            "key": comp[KEYS[:-1]].astype(str).agg("/".join, axis=1) + "/1", "run": i,
            # Relative to the baseline's decode: the pace of a bigger model moves more.
            "decode": comp["decode_delta_ms"] / comp["decode_ms_per_token_base"],
            "decode_se": np.hypot(comp["decode_ms_se"], comp["decode_ms_se_base"])
            / comp["decode_ms_per_token_base"],
            "prefill": ratio - 1,
            "prefill_se": ratio * np.hypot(comp["prefill_tps_se"] / comp["prefill_tps"],
                                           comp["prefill_tps_se_base"]
                                           / comp["prefill_tps_base"])}))
    found = []
    for key, cell in pd.concat(rows, ignore_index=True).groupby("key") if rows else []:
        for figure, value in (("sequential_decode", "decode"),
                              ("sequential_prefill", "prefill")):
            term = _excess(cell[value], cell[f"{value}_se"], absolute=True)
            if term is not None:
                found.append((key, figure, term))
    return found


def _excess(values: pd.Series, ses: pd.Series, absolute: bool) -> float | None:
    """One cell's run-to-run standard deviation beyond a typical run's own standard
    error: relative to its mean, or absolute; None from fewer than two runs.

    A typical run's, the median of their squares, not their mean: a bootstrap's standard
    error has a long right tail (a resample that draws a stalled request twice), and one
    or two runs' inflated errors, averaged in, cancelled the whole run-to-run term of
    cells whose figure does move between runs (each p99 gap of the 5k single-stream
    cells: term 0, its ± held 80% of 18 runs left out)."""
    x = pd.to_numeric(values, errors="coerce")
    s = pd.to_numeric(ses, errors="coerce")
    keep = x.notna() & s.notna()
    x, s = x[keep].to_numpy(float), s[keep].to_numpy(float)
    if len(x) < 2 or (not absolute and x.mean() == 0):
        return None
    excess = float(np.sqrt(max(0.0, x.var(ddof=1) - np.median(s ** 2))))
    return excess if absolute else excess / abs(float(x.mean()))


def _prediction_terms(runs: list[dict]) -> dict[str, float]:
    """The sweep slope's relative spread across runs (less its own ±'s part) and the
    model's error: the root mean square over links of the mean measured paired cost
    less the mean prediction."""
    slopes = [t for r in runs for t in _trips(r, r["summary"])[["workers", "round_trips",
                                                   "round_trips_se"]].itertuples()]
    rel = []
    for workers in {t.workers for t in slopes}:
        x = np.array([t.round_trips for t in slopes if t.workers == workers])
        s = np.array([t.round_trips_se for t in slopes if t.workers == workers], float)
        if len(x) >= 3 and (term := _excess(pd.Series(x), pd.Series(s), False)) is not None:
            rel.append(term ** 2)
    costs = pd.concat([_costs(r, _with_terms(r, None)) for r in runs], ignore_index=True)
    bias = costs.groupby(["link", "ctx"])[["measured", "predicted"]].mean()
    error = (bias["measured"] - bias["predicted"]).dropna()
    terms = {"slope_rel_sd": round(float(np.sqrt(np.mean(rel))) if rel else 0.0, 4),
             "model_error_ms": _rms(error)}
    # Per context too: the host-A term the model leaves out is the lab's at short
    # (each link 0.015-0.05 under), not at 5k (within 0.02), and one number for both
    # made the prediction's ± at 5k as wide as short's error.
    for ctx, at in error.groupby(level="ctx"):
        terms[f"model_error_ms/{ctx}"] = _rms(at)
    return terms


def _rms(error: pd.Series) -> float:
    return round(float(np.sqrt(np.mean(error ** 2))) if len(error) else 0.0, 4)


def _with_terms(run: dict, calibration: dict | None) -> pd.DataFrame:
    """The run's summary with the run-to-run terms of `calibration` (none: its own)."""
    pairs = run["summary"]["pair"].unique()
    return between_runs.apply(run["summary"], {p: calibration for p in pairs}
                              if calibration else {})


def _trips(run: dict, summary: pd.DataFrame) -> pd.DataFrame:
    """The run's round trips (with the sweep slope's run-to-run term where `summary`,
    _with_terms, carries one)."""
    return comparison.round_trips(run["sweeps"], summary)


def _comparison(run: dict, summary: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run's link comparison from `summary` (_with_terms) and the drift it used."""
    base = cell_summary.pick_baseline(summary, run["config"].get("baseline_link"))
    drift = comparison.machine_drift(run["anchors"], summary, base)
    return comparison.compare_links(summary, base, drift), drift


def _sequential(comp: pd.DataFrame) -> pd.DataFrame:
    """Each link cost of the comparison `comp` measured in blocks apart from the
    baseline's (every cell not paired round by round): decode ms/token and prefill
    change, with their ±."""
    comp = comp[comp["paired_decode_delta_ms"].isna() & comp["decode_delta_ms"].notna()]
    if comp.empty:
        return pd.DataFrame(columns=["key", "decode", "decode_unc", "prefill", "prefill_unc"])
    key = comp["link"] + "/" + comp["model"] + "/" + comp["ctx"].astype(str)
    return pd.DataFrame({"key": key, "decode": comp["decode_delta_ms"],
                         "decode_unc": comp["decode_delta_unc_ms"],
                         "prefill": comp["prefill_change_pct"],
                         "prefill_unc": comp["prefill_change_unc_pct"]})


def _costs(run: dict, summary: pd.DataFrame) -> pd.DataFrame:
    """Each paired link cost (measured, its ±) beside its prediction (its ±), with the
    run-to-run terms `summary` (_with_terms) carries in the prediction's ±."""
    comp, drift = _comparison(run, summary)
    return _predicted(run, comp, drift, _trips(run, summary))


def _predicted(run: dict, comp: pd.DataFrame, drift: pd.DataFrame,
               trips: pd.DataFrame) -> pd.DataFrame:
    """_costs from a comparison, its drift and round trips already made."""
    workers = {m: 1 for m in comp["model"].unique()}
    guess = comparison.predicted_decode_delta(comp, run["links"], trips, workers, drift)
    paired = comp["paired_decode_delta_ms"].notna()
    return pd.DataFrame({
        "link": comp["link"], "ctx": comp["ctx"], "model": comp["model"],
        "measured": comp["decode_delta_ms"], "measured_unc": comp["decode_delta_unc_ms"],
        "predicted": guess["predicted_decode_delta_ms"],
        "predicted_unc": guess["predicted_decode_delta_unc_ms"]})[paired.to_numpy()]


# --- coverage -----------------------------------------------------------------------------
def kinds(run: dict, calibration: dict) -> dict[str, pd.DataFrame]:
    """Per kind of figure, one row per figure of this run: key, value, unc (and for a
    share its interval's ends)."""
    pairs = run["summary"]["pair"].unique()
    summary = _with_terms(run, calibration)
    ok = summary[summary["status"] == "ok"]
    key = ok[KEYS].astype(str).agg("/".join, axis=1)
    single, many = ok["conc"] == 1, ok["conc"] > 1

    def cell(value: str, unc: str, where: pd.Series) -> pd.DataFrame:
        return pd.DataFrame({"key": key[where], "value": ok.loc[where, value],
                             "unc": ok.loc[where, unc]})

    out = {"cell decode (single)": cell("decode_ms_per_token", "decode_ms_unc", single),
           "cell decode (concurrent)": cell("decode_ms_per_token", "decode_ms_unc", many),
           "prefill": cell("prefill_tps", "prefill_tps_unc", single),
           "TTFT": cell("ttft_ms", "ttft_ms_unc", single),
           "throughput": cell("throughput_tps", "throughput_tps_unc", many),
           "overlap": cell("overlap", "overlap_unc", many)}
    paired = ok[ok["paired_decode_delta_ms"].notna()]
    out["paired link cost"] = pd.DataFrame({
        "key": key[paired.index], "value": paired["paired_decode_delta_ms"],
        "unc": paired["paired_decode_unc"]})
    dist = between_runs.apply_percentiles(run["percentiles"], {p: calibration for p in pairs}
                                          if calibration else {})
    itl = dist[(dist["metric"] == "inter_token_latency_ms") & ~dist["p99_too_few"]
               .fillna(False).astype(bool)]
    out["p99 gap"] = pd.DataFrame({
        "key": itl[KEYS].astype(str).agg("/".join, axis=1), "value": itl["p99"],
        "unc": itl["p99_unc"]})
    levels = run["levels"]
    if len(levels):
        out["share"] = pd.DataFrame({
            "key": levels[KEYS].astype(str).agg("/".join, axis=1), "value": levels["met_pct"],
            "low": levels.get("met_low_pct"), "high": levels.get("met_high_pct")})
    trips = _trips(run, summary)
    out["round trips"] = pd.DataFrame({
        "key": trips["workers"].astype(str), "value": trips["round_trips"],
        "unc": intervals.halfwidth(trips["round_trips_se"].to_numpy(float),
                                   trips["round_trips_dof"].to_numpy(float))})
    comp, drift = _comparison(run, summary)
    sequential = _sequential(comp)
    out["link cost (sequential)"] = pd.DataFrame({
        "key": sequential["key"], "value": sequential["decode"],
        "unc": sequential["decode_unc"]})
    out["prefill change (sequential)"] = pd.DataFrame({
        "key": sequential["key"], "value": sequential["prefill"],
        "unc": sequential["prefill_unc"]})
    costs = _predicted(run, comp, drift, trips)
    out["prediction"] = pd.DataFrame({
        "key": costs["link"] + "/" + costs["ctx"], "value": costs["predicted"],
        "unc": costs["predicted_unc"], "measured": costs["measured"]})
    return out


def coverage(runs: list[dict], calibrated: Callable[[int], dict]) -> pd.DataFrame:
    """Per kind of figure: leave-one-out checks, how many the ± held, and the ratio of
    the spread across runs to the median ±. `calibrated(i)`: the calibration run i
    carries (from the other runs)."""
    per_run = [kinds(run, calibrated(i)) for i, run in enumerate(runs)]
    k = len(runs)
    rows = []
    for kind in per_run[0]:
        frames = [pr[kind].assign(run=i) for i, pr in enumerate(per_run) if kind in pr]
        table = pd.concat(frames, ignore_index=True).dropna(subset=["value"])
        # A prediction is held against what the other runs measured, not predicted.
        target_column = "measured" if kind == "prediction" else "value"
        checks, held, ratios = 0, 0, []
        for _, group in table.groupby("key"):
            if group["run"].nunique() < 3:
                continue
            devs, uncs = [], []
            for row in group.itertuples():
                others = group[group["run"] != row.run][target_column]
                target = float(others.mean())
                dev = row.value - target
                if kind == "share":
                    ok = row.low <= target <= row.high
                    unc = (row.high - row.low) / 2
                else:
                    unc = row.unc
                    if not np.isfinite(unc):
                        continue
                    ok = abs(dev) <= unc
                checks += 1
                held += bool(ok)
                devs.append(dev)
                uncs.append(unc)
            if len(devs) >= 3 and np.median(uncs) > 0:
                sd = np.sqrt(np.mean(np.square(devs)) * (k - 1) / k)
                ratios.append(intervals.t_factor(intervals.UNBOUNDED) * sd / np.median(uncs))
        rows.append({"kind": kind, "checks": checks, "held": held,
                     "coverage": held / checks if checks else np.nan,
                     "spread / ±": float(np.median(ratios)) if ratios else np.nan,
                     "figures": table["key"].nunique()})
    return pd.DataFrame(rows)


def _batches(calibration: dict) -> str:
    batches = calibration.get("batches", [_batch(calibration)])
    return ", ".join(f"{b['runs']} runs of {b['measured']}" for b in batches)


def markdown(table: pd.DataFrame) -> str:
    """The table as Markdown (coverage as a percentage, ratios to two decimals)."""
    lines = ["| " + " | ".join(table.columns) + " |",
             "|" + "---|" * len(table.columns)]
    for row in table.itertuples(index=False):
        cells = [f"{v:.0%}" if name == "coverage" and np.isfinite(v) else
                 f"{v:.2f}" if isinstance(v, float) else str(v)
                 for name, v in zip(table.columns, row, strict=True)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--config", type=Path, default=ROOT / "config" / "config.yaml")
    parser.add_argument("--work", type=Path, default=Path("/tmp/sb-coverage"))
    parser.add_argument("--analyse", action="store_true",
                        help="analyse the runs under --work without measuring")
    parser.add_argument("--calibrate", action="store_true",
                        help=f"write the run-to-run terms of all the runs to {CALIBRATION}")
    parser.add_argument("--pool", action="store_true",
                        help="with --calibrate: pool the runs' terms with the file's (a "
                        "batch of runs measured at another time)")
    parser.add_argument("--against", type=Path, metavar="CALIBRATION",
                        help="check each run against this calibration file (out of "
                        "sample: runs it was not made from) instead of leave-one-out")
    args = parser.parse_args(argv)
    if not args.analyse:
        measure(args.work, args.runs, args.config)
    dirs = sorted(p for p in args.work.glob("run-*")
                  if (p / "results" / "summary" / "cells.parquet").exists())
    if len(dirs) < 3:
        print(f"{len(dirs)} complete run(s) under {args.work}: at least 3 are needed")
        return 1
    runs = [run_figures(p) for p in dirs]
    if args.against:
        fixed = yaml.safe_load(args.against.read_text())
        table = coverage(runs, lambda i: fixed)
        how = f"its run-to-run term from {args.against} ({_batches(fixed)})"
    else:
        table = coverage(runs, lambda i: calibrate([r for j, r in enumerate(runs)
                                                    if j != i]))
        how = "its run-to-run term calibrated from the others"
    print(f"\n{len(runs)} runs under {args.work}; each run's ± against the mean of the "
          f"others ({how}):\n")
    print(markdown(table))
    if args.calibrate:
        found = calibrate(runs)
        if args.pool:
            found = pooled(yaml.safe_load(CALIBRATION.read_text()), found)
        CALIBRATION.write_text(
            "# The embedded lab's run-to-run variation, from A/A runs of the embedded default\n"
            "# (benchmarks/coverage.py --calibrate; summary/between_runs.py reads it).\n"
            + yaml.safe_dump(found, sort_keys=False))
        print(f"\nwrote {CALIBRATION}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
