"""How long a matrix is expected to take: the sum of its jobs' expected durations.

`splitbench.workflow.cluster` gives each job its worst case (every request at the request
timeout), which a SLURM time limit needs. This gives the expected case, for planning a
run: every request takes its prompt at the model's prefill rate and its tokens at its
decode rate, and each cell sends as many requests as `cells.stopping.more_shots` would
(its minimum count, more while it has run under its seconds, fewer where its precision
targets are met at a checkpoint first: the count at which each target's figure, its
one-sample ± from the summary falling as 1/sqrt(n), is within it). The rates and
spreads are the caller's: a previous run's summary (`results/summary/cells.parquet`),
or any table of the same shape, through `speeds_from_summary`.

What it leaves out: a concurrent release is taken as the summary measured one at that
concurrency (the median over its links), or, where none did, as its N prompts
prefilled one after another (llama.cpp prefills one slot at a time) then N streams
decoding at the single-stream rate; a cell that crashes or overflows is counted as if
it ran. A context that meets the model's context wall (Speed None) costs one quick
failed release.

    from splitbench.matrix import estimate, plan
    config = configuration.parsed(plan.read_yaml("config/examples/seed-6x3.yaml"))
    estimate.expected_seconds(config, speeds)["total"] / 3600   # hours
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from splitbench.configuration import Config
from splitbench.contracts import results
from splitbench.infra import intervals, precision, stamps
from splitbench.matrix import plan

# What every job costs besides its measurement, where no run has measured it (Overheads):
# Snakemake's turn between jobs, the interpreter and its imports, the SSH login to host
# B, the sensors and the interference meter starting and stopping. Measured
# (overheads_from): 0.9 s a job on the embedded lab, 1.5 s on the tests' pair over SSH
# with a B of its own (both on 2 cores); a real pair's sensors may take longer.
JOB_OVERHEAD_S = 10.0
# A launch: both servers start and load the model, host B's layers sent to it over the
# link (tens of GB at about 5 Gbit/s is about a minute). Pass launch_s for your own.
LAUNCH_S = 120.0
# Beside the load a launch record measures: the workers starting, the warm-up request
# and the listening checks.
LAUNCH_SETUP_S = 5.0
# A link check besides iperf3: setup, 20 pings, the request-response sweep, sockperf.
LINK_CHECK_S = 30.0
# The summary, tables, charts, drift step, report and checks after the last cell.
AFTER_S = 120.0


@dataclass(frozen=True)
class Speed:
    """What the estimate assumes of one model at one context: its single-stream prefill
    rate (prompt tokens over time to first token) and decode rate, tok/s; and, where a
    summary measured them, what one sample pins each figure to (`unit_unc`: by
    concurrency level, each precision target's figure's ± times the square root of its
    samples, the ± of a single sample), so that the estimate stops a cell where its
    precision targets would (infra/precision.py); and one release's measured seconds by
    concurrency above 1 (`release_s`: on shaped links slower than the single-stream
    rates make it)."""

    prefill_tps: float
    decode_tps: float
    unit_unc: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    release_s: Mapping[int, float] = field(default_factory=dict)


Speeds = Mapping[tuple[str, str], Speed | None]


@dataclass(frozen=True)
class Overheads:
    """What a run spends besides its requests: per job (`job_s`), per link check (the
    whole check, `link_check_s`; None: from its settings), per launch job (`launch_s`),
    per round-trips sweep (the whole sweep, `sweep_s`; None: from its settings) and
    after the last cell (the summary, tables, charts and report, `after_s`).
    `measured` names what a run's logs gave; the rest are the assumed defaults."""

    job_s: float = JOB_OVERHEAD_S
    link_check_s: float | None = None
    launch_s: float = LAUNCH_S
    sweep_s: float | None = None
    after_s: float = AFTER_S
    measured: tuple[str, ...] = ()


# Each measuring job's log says when it started and ended (infra/stamps.py), under
# results/logs/<kind>/...: the kind is the log's first folder.
_CELL_LOG = re.compile(r"cells/([^/]+)/([^/]+)/([^/]+)/ctx(.+)_c(\d+)\.log$")


# The most recent job logs read: enough for every median, and a 50,000-cell matrix's
# doctor reads no more (all 50,000 took 2 s).
RECENT_LOGS = 2000


def _job_times(root: Path) -> list[tuple[str, int, int, str]]:
    """(kind, start ns, end ns, log path relative to the logs folder) of the most recent
    measuring jobs whose logs have both stamps (a job's last run's: a rerun rewrites its
    log)."""
    logs = Path(results.under(root, results.LOGS))
    dated = []
    for path in logs.rglob("*.log"):
        with contextlib.suppress(OSError):  # gone meanwhile (another run's rerun)
            dated.append((path.stat().st_mtime, path))
    jobs = []
    for _, path in sorted(dated)[-RECENT_LOGS:]:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        times = stamps.read(text)
        if times is not None:
            relative = path.relative_to(logs).as_posix()
            jobs.append((relative.split("/")[0], *times, relative))
    return sorted(jobs, key=lambda job: job[1])


def overheads_from(root: str | Path, summary: pd.DataFrame | None = None) -> Overheads:
    """The overheads a run measured, from its measuring jobs' logs: a job's is the
    median gap between one job's end and the next one's start (Snakemake's turn, the
    interpreter and its imports), plus the median time a single-stream cell's process
    took beyond its requests (the summary's `wall_ms`); a link check's and a launch's,
    their jobs' median and longest durations (the launch's is expected_seconds'
    `launch_s`); a sweep's, its jobs' median; the report's, from the last job's end to
    results/checks.txt. Where the logs hold none, the assumed defaults."""
    root = Path(root)
    jobs = _job_times(root)
    if len(jobs) < 2:
        return Overheads()
    gaps = [(b[1] - a[2]) / 1e9 for a, b in itertools.pairwise(jobs) if b[1] > a[2]]
    job_s = statistics.median(gaps) if gaps else JOB_OVERHEAD_S
    beyond = _beyond_requests(jobs, summary)
    if beyond is not None:
        job_s += beyond
    measured = ["job"]
    seconds = {kind: [(end - start) / 1e9 for k, start, end, _ in jobs if k == kind]
               for kind in ("links", "servers", "roundtrips")}
    link_check_s = statistics.median(seconds["links"]) if seconds["links"] else None
    launch_s = max(seconds["servers"]) if seconds["servers"] else LAUNCH_S
    sweep_s = statistics.median(seconds["roundtrips"]) if seconds["roundtrips"] else None
    measured += [name for name, got in (("link check", seconds["links"]),
                                        ("launch", seconds["servers"]),
                                        ("sweep", seconds["roundtrips"])) if got]
    after_s = AFTER_S
    checks = Path(results.under(root, results.CHECKS))
    last_end = max(end for _, _, end, _ in jobs) / 1e9
    if checks.exists() and checks.stat().st_mtime > last_end:
        after_s = checks.stat().st_mtime - last_end
        measured.append("report")
    return Overheads(job_s=job_s, link_check_s=link_check_s, launch_s=launch_s,
                     sweep_s=sweep_s, after_s=after_s, measured=tuple(measured))


def _beyond_requests(jobs: list[tuple[str, int, int, str]],
                     summary: pd.DataFrame | None) -> float | None:
    """The median time a single-stream cell's job took beyond its requests' wall time
    (a concurrent cell's `wall_ms` in the summary is one release's, not the cell's)."""
    if summary is None or "wall_ms" not in summary.columns:
        return None
    walls = {(str(r.pair), str(r.link), str(r.model), str(r.ctx), int(r.conc)): r.wall_ms
             for r in summary.itertuples() if r.conc == 1 and pd.notna(r.wall_ms)}
    beyond = []
    for kind, start, end, relative in jobs:
        found = _CELL_LOG.search(relative) if kind == "cells" else None
        if found:
            key = (*found.groups()[:4], int(found.group(5)))
            if key in walls:
                beyond.append(max((end - start) / 1e9 - walls[key] / 1000, 0.0))
    return statistics.median(beyond) if beyond else None


def speeds_from_summary(summary: pd.DataFrame) -> dict[tuple[str, str], Speed | None]:
    """(model, ctx) -> Speed from a summary's single-stream rows (columns model, ctx,
    conc, status, prefill_tps, decode_tps): the median over its links of the ok rows;
    None where no link ran the context (every row a context wall or a failure). Its
    concurrent rows' `wall_ms` (one release's), where present, give `release_s`."""
    single = summary[summary["conc"] == 1]
    units = unit_uncertainties(summary)
    released = _release_seconds(summary)
    out: dict[tuple[str, str], Speed | None] = {}
    for (model, ctx), rows in single.groupby(["model", "ctx"], sort=False):
        ok = rows[(rows["status"] == "ok") & rows["prefill_tps"].notna()
                  & rows["decode_tps"].notna()]
        out[(str(model), str(ctx))] = (
            Speed(float(ok["prefill_tps"].median()), float(ok["decode_tps"].median()),
                  units.get((str(model), str(ctx)), {}),
                  released.get((str(model), str(ctx)), {}))
            if len(ok) else None)
    return out


def _release_seconds(summary: pd.DataFrame) -> dict[tuple[str, str], dict[int, float]]:
    """(model, ctx) -> conc -> one release's seconds: the median over the summary's ok
    concurrent cells (its links) of `wall_ms`, a concurrent cell's median release."""
    if "wall_ms" not in summary.columns:
        return {}
    walls = summary.assign(wall_s=pd.to_numeric(summary["wall_ms"], errors="coerce") / 1000)
    ok = walls[(walls["conc"] > 1) & (walls["status"] == "ok") & walls["wall_s"].notna()]
    out: dict[tuple[str, str], dict[int, float]] = {}
    for (model, ctx, conc), rows in ok.groupby(["model", "ctx", "conc"], sort=False):
        out.setdefault((str(model), str(ctx)), {})[int(conc)] = float(rows["wall_s"].median())
    return out


# Each precision target's figure in a summary: its ± (at the normal quantile: the
# estimate's samples are many; relative where the target is) from its columns, and the
# column counting its samples.
COVERAGE = intervals.t_factor(intervals.UNBOUNDED)
def _unit(rows: pd.DataFrame, target: str) -> pd.Series:
    def col(name: str) -> pd.Series:
        return pd.to_numeric(rows[name], errors="coerce") if name in rows \
            else pd.Series(float("nan"), rows.index)

    unc, samples = {
        "decode_rel": (COVERAGE * col("decode_ms_se") / col("decode_ms_per_token"),
                       col("samples")),
        "prefill_rel": (COVERAGE * col("prefill_tps_se") / col("prefill_tps"),
                        col("samples")),
        "throughput_rel": (COVERAGE * col("throughput_tps_se") / col("throughput_tps"),
                           col("releases")),
        "paired_decode_ms": (COVERAGE * col("paired_decode_delta_se"),
                             col("paired_rounds")),
    }[target]
    return unc.abs() * samples ** 0.5


def unit_uncertainties(summary: pd.DataFrame) -> dict[tuple[str, str], dict[int, dict]]:
    """(model, ctx) -> conc -> target -> the ± of one sample: the median over the
    summary's ok cells (its links) of each figure's ± times sqrt(its samples)."""
    ok = summary[summary["status"] == "ok"]
    out: dict[tuple[str, str], dict[int, dict]] = {}
    for (model, ctx, conc), rows in ok.groupby(["model", "ctx", "conc"], sort=False):
        kinds = precision.CONCURRENT_TARGETS if conc > 1 else (
            *precision.SINGLE_STREAM_TARGETS, *precision.PAIRED_TARGETS)
        units = {target: float(_unit(rows, target).median()) for target in kinds}
        known = {k: v for k, v in units.items() if v == v}  # NaN: not measured
        if known:
            out.setdefault((str(model), str(ctx)), {})[int(conc)] = known
    return out


def samples_to_target(targets: Mapping[str, float], unit_unc: Mapping[str, float],
                      first: int, least: int = 1) -> int | None:
    """The checkpoint at which every target is expected to be reached, a figure's ±
    falling as 1/sqrt(samples) from its one-sample ± (infra/precision.py's rule), and
    the cell past its floor `least` (the rule looks only there); None where a targeted
    figure's spread is unknown (the cell runs to its ceiling)."""
    if not targets or any(t not in unit_unc for t in targets):
        return None
    needed = max((unit_unc[t] / target) ** 2 for t, target in targets.items())
    return precision.checkpoint_at_least(max(needed, least), first)


def launch_seconds_from(root: str | Path) -> float | None:
    """The longest load a run's launch records measured (`load_s`, results/servers/), or
    None where it has none: the estimate's launch time where a run measured its own (a
    launch that sends B's weights again is as long as the longest)."""
    loads = []
    for path in Path(results.under(root, results.LAUNCH)).parents[2].glob("*/*/*.json"):
        try:
            loads.append(float(json.loads(path.read_text())["load_s"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a launch that failed, or a record from before load_s
    return max(loads) + LAUNCH_SETUP_S if loads else None


def release_seconds(prompt_tokens: int, concurrency: int, n_predict: int,
                    speed: Speed | None) -> float:
    """One release of a cell's requests: as long as a summary measured one at this
    concurrency (`speed.release_s`), else its prompts prefilled one after another, then
    n_predict tokens decoded. A context wall (speed None) is refused at once."""
    if speed is None:
        return 0.0
    if concurrency in speed.release_s:
        return speed.release_s[concurrency]
    return concurrency * prompt_tokens / speed.prefill_tps + n_predict / speed.decode_tps


def releases(least: int, seconds: float, release_s: float,
             stop_at: int | None = None) -> int:
    """How many releases a cell sends (cells.stopping.more_shots): at least `least`, and
    more while it has run under `seconds`, but no more than `stop_at` (the checkpoint
    where its precision targets are expected to be reached) beyond `least`."""
    if release_s <= 0:
        return max(least, 1)
    ceiling = max(least, 1, math.ceil(seconds / release_s))
    return ceiling if stop_at is None else min(ceiling, max(least, 1, stop_at))


def cell_seconds(config: Config, cell: plan.Cell, speed: Speed | None,
                 launch_s: float = LAUNCH_S, anchor: bool = False,
                 job_s: float = JOB_OVERHEAD_S) -> float:
    """A cell's expected duration: its releases (every repeat), a paired cell's rounds
    on both links and its reference launch, and the job's own overhead. A drift anchor
    (`anchor`) has no precision targets (plan.anchor_slice)."""
    settings = plan.cell_settings(config)
    one = release_seconds(config.contexts[cell.ctx], cell.conc, settings["n_predict"],
                          speed)
    paired = plan.paired_for(config, cell)
    targets = {} if anchor else plan.precision_for(config, cell, paired is not None)
    units = speed.unit_unc.get(cell.conc, {}) if speed else {}
    if speed is None:
        measured = one  # the first release fails: the cell stops there
    elif paired:
        rounds = samples_to_target(precision.targets_for(targets, precision.PAIRED_TARGETS),
                                   units, precision.FIRST_LOOK_PAIRED)
        measured = launch_s + min(paired["rounds"], rounds or paired["rounds"]) \
            * paired["requests"] * 2 * one
    elif cell.conc == 1:
        least = settings["single_stream_requests"]
        measured = one * releases(least, settings["single_stream_seconds"], one,
                                  samples_to_target(targets, units, precision.FIRST_LOOK,
                                                    least))
    else:
        least = settings.get("concurrent_releases", 1)
        measured = one * releases(least, settings.get("concurrent_seconds", 0.0), one,
                                  samples_to_target(targets, units,
                                                    precision.FIRST_LOOK_RELEASES, least))
    return job_s + measured * config.repeats


def link_seconds(config: Config, overheads: Overheads = Overheads()) -> float:
    """A link check: as long as a run measured one (`overheads.link_check_s`); else
    iperf3 A->B, B->A and both ways at once, `iperf_repeats` times (its ceiling: a
    link's spread is not known before it is checked, so the estimate does not stop its
    runs early, `iperf_spread_rel`), and the rest of the check."""
    if overheads.link_check_s is not None:
        return overheads.job_s + overheads.link_check_s
    check = plan.link_check_settings(config)
    iperf = 3 * check["iperf_repeats"] * (check["iperf_seconds"] + check["iperf_omit"] + 1)
    return overheads.job_s + LINK_CHECK_S + iperf


def sweep_seconds(config: Config, model: str, speed: Speed | None,
                  launch_s: float = LAUNCH_S, job_s: float = JOB_OVERHEAD_S,
                  measured_s: float | None = None) -> float:
    """A round-trips sweep: as long as a run measured one (`measured_s`), else a launch
    per delay point, side by side, then `requests` rounds of one short request per point
    (at the model's shortest context's speed)."""
    if measured_s is not None:
        return job_s + measured_s
    sweep = plan.roundtrip_settings(config) or {}
    points = len(sweep.get("delays_ms", ()))
    one = release_seconds(sweep.get("prompt_tokens", 0), 1, sweep.get("n_predict", 0), speed)
    return job_s + points * (launch_s + sweep.get("requests", 0) * one)


def expected_seconds(config: Config, speeds: Speeds, launch_s: float = LAUNCH_S,
                     overheads: Overheads = Overheads()) -> dict[str, float]:
    """The matrix's expected duration in seconds, by kind of job and in total, one job
    at a time (`--cores 1`, or one pair's jobs on its own). `speeds` maps every
    (model, context) to its Speed, or None for a context the model cannot hold;
    `overheads` what the jobs cost besides their requests (`overheads_from` a run)."""
    job_s = overheads.job_s
    missing = sorted({(c.model, c.ctx) for c in plan.cells(config)} - set(speeds))
    if missing:
        raise ValueError(f"no speed for (model, context) {missing[:5]}"
                         f"{' ...' if len(missing) > 5 else ''}")
    pairs = config.pairs
    shortest = min(config.contexts, key=config.contexts.__getitem__)
    anchors = [plan.anchor_cell(config, pair, model) for pair in pairs
               for model in config.models] * 2  # one at the start, one at the end
    parts = {
        "setup": job_s * (len(pairs) + len(config.models)),  # toolchains, models
        "links": link_seconds(config, overheads) * sum(len(spec.links)
                                                       for spec in pairs.values()),
        "launches": (job_s + launch_s) * len(plan.blocks(config)),
        "cells": sum(cell_seconds(config, c, speeds[(c.model, c.ctx)], launch_s,
                                  job_s=job_s) for c in plan.cells(config)),
        "anchors": sum(cell_seconds(config, c, speeds[(c.model, c.ctx)], launch_s,
                                    anchor=True, job_s=job_s) for c in anchors),
        "roundtrips": sum(sweep_seconds(config, model, speeds[(model, shortest)], launch_s,
                                        job_s, overheads.sweep_s)
                          for _, model, _ in plan.roundtrip_sweeps(config)),
        "report": overheads.after_s,
    }
    parts["total"] = sum(parts.values())
    return parts
