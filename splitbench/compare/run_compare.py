"""Two runs side by side: a results directory against another (a cable, a driver, an MTU
or a llama.cpp version changed between them).

The cells both measured are compared figure by figure: B's less A's, with the 95%
interval of that difference (infra.intervals): two measurements made at different
times, so each one's own standard error (at its samples' degrees of freedom) and
either the machine's variation between runs where a summary carries it
(`*_between_se`, measured on A/A runs: it holds the drift within a run too) or else the
machine's drift over its run (the spread of its drift anchors' repeats,
comparison.machine_drift: what the run's own sequential comparisons allow for),
combined with their Welch-Satterthwaite degrees of freedom. A link's cost carries its
paired term across runs (`paired_decode_between_se`) where calibrated. Each change has a two-sided
p-value. A compare tests dozens of figures at once, so about one in twenty lies beyond
its own ± by chance alone: ⚠ marks only the changes that survive Holm's step-down
correction over every figure tested (`flag`, 5% family-wise), and the count says how
many chance alone would give. A cell either run flagged (other work on the CPUs) is
said to be and is not tested. Cells one run alone has are listed, not compared. The
findings whose headline appears in one run only are listed too, and what differs in the
runs' provenance: each pair's llama.cpp builds and each link's facts (kernel, MTU,
negotiated speed, how it was made). What an older results directory did not record is
said, not invented.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from splitbench.compare import comparison
from splitbench.contracts import findings_file, results
from splitbench.infra import intervals
from splitbench.infra.parquet_io import numbers
from splitbench.summary import between_runs
from splitbench.summary.cell_summary import pick_baseline, read_links

# (figure, its standard error, its title, decimals, the drift that moves it: time to
# first token is mostly prefill)
FIGURES = [("decode_ms_per_token", "decode_ms_se", "decode (ms/token)", 3, "decode"),
           ("prefill_tps", "prefill_tps_se", "prefill (tok/s)", 1, "prefill"),
           ("ttft_ms", "ttft_ms_se", "TTFT (ms)", 1, "prefill")]
KEYS = list(results.CELL_KEYS)
# A link's facts whose change is a change of the setup, not of the measurement.
LINK_FACTS = ["kernel_a", "kernel_b", "mtu_a", "mtu_b", "negotiated_gbps", "driver_a",
              "driver_b", "emulation_mode", "emulation_rate", "emulation_delay",
              "emulated_delay_ms", "emulated_rate_gbit_a_to_b"]
BUILD_FACTS = ["llama_server_version", "build_id", "ggml-rpc-server_sha256"]
# The chance of any false ⚠ among all the figures one compare tests (Holm).
FAMILY_ALPHA = 1 - intervals.LEVEL


def read_summary(root: str | Path) -> pd.DataFrame:
    path = Path(results.under(root, results.SUMMARY))
    if not path.exists():
        raise FileNotFoundError(f"{root}: no {results.SUMMARY.split('/', 1)[1]} (run "
                                "`snakemake --cores 1 all` there first)")
    return pd.read_parquet(path)


def drift(root: str | Path, summary: pd.DataFrame) -> pd.DataFrame:
    """The machine's drift over one run, per pair and model (comparison.machine_drift
    from its anchors and baseline cells)."""
    return comparison.machine_drift(results.anchor_requests(root), summary,
                                    baseline_of(root, summary))


def baseline_of(root: str | Path, summary: pd.DataFrame) -> str | None:
    """The run's baseline link: the one its what-if model names, else
    cell_summary.pick_baseline's."""
    model = Path(results.under(root, results.WHATIF))
    named = pd.read_parquet(model)["baseline"] if model.exists() else pd.Series([])
    return pick_baseline(summary, named.iloc[0] if len(named) else None)


# --- the statistics ------------------------------------------------------------------------
def between_column(se: str) -> str:
    """The summary column with the machine's variation between runs of the figure whose
    own standard error is `se` (`decode_ms_se` → `decode_ms_between_se`): what one
    run's own spread cannot see."""
    return f"{se.removesuffix('_se')}_between_se"


def dof_of(samples: pd.Series) -> pd.Series:
    """A figure's degrees of freedom from its sample count (n - 1). Unbounded (the
    normal) where nothing says the count (a summary from before it was recorded) or
    under two (a one-pass lower bound, never tested)."""
    return (samples - 1).where(samples >= 2, intervals.UNBOUNDED)


def p_value(change: Any, se: Any, dof: Any) -> np.ndarray:
    """The two-sided p-value of each `change` against none: its t statistic (change /
    se) under Student's t at `dof`; NaN where either is unknown."""
    change, se, dof = (np.asarray(x, dtype=float) for x in (change, se, dof))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.abs(change) / se
    return np.asarray(2 * intervals.t_sf(t, dof), dtype=float)


def holm(p_values: Any, alpha: float = FAMILY_ALPHA) -> np.ndarray:
    """Holm's step-down procedure: which `p_values` are rejected with at most `alpha`
    chance of any false rejection among them all. The smallest must be under alpha/m,
    the next under alpha/(m-1), and so on; the first that is not stops it. A NaN is not
    a test: never rejected, not counted in m."""
    p = np.asarray(p_values, dtype=float)
    rejected = np.zeros(p.shape, dtype=bool)
    tested = np.flatnonzero(np.isfinite(p))
    order = tested[np.argsort(p[tested], kind="stable")]
    passes = p[order] <= alpha / (order.size - np.arange(order.size))
    rejected[order] = np.cumprod(passes).astype(bool)
    return rejected


def _beyond(change: pd.Series, unc: pd.Series, lower: pd.Series) -> list[bool | None]:
    """Whether each change lies beyond its own ± (uncorrected): None where unknown, or
    where only a lower bound of the ± is exceeded (which proves nothing)."""
    outside = change.abs() > unc
    known = change.notna() & unc.notna()
    # Python's True, False or None: flag() counts `is True`.
    return [bool(o) if k and not (o and lo) else None
            for o, k, lo in zip(outside, known, lower, strict=True)]


def _test(frame: pd.DataFrame, prefix: str, change: pd.Series, se: pd.Series,
          dof: pd.Series, lower: pd.Series) -> None:
    """A change's columns (`prefix`: `decode_ms_per_token_` or none): its standard
    error, degrees of freedom, ±, p-value (NaN where it is not tested: no ±, or a ± only
    a lower bound) and whether it lies beyond its own ±."""
    frame[f"{prefix}change"], frame[f"{prefix}se"], frame[f"{prefix}dof"] = change, se, dof
    frame[f"{prefix}unc"] = pd.Series(intervals.halfwidth(se, dof), index=frame.index)
    frame[f"{prefix}lower_bound"] = lower
    known = change.notna() & se.notna()
    frame[f"{prefix}p"] = pd.Series(p_value(change, se, dof),
                                    index=frame.index).where(known & ~lower)
    frame[f"{prefix}beyond"] = pd.Series(_beyond(change, frame[f"{prefix}unc"], lower),
                                         index=frame.index, dtype=object)


# --- the cells -----------------------------------------------------------------------------
def cells(a: pd.DataFrame, b: pd.DataFrame, drift_a: pd.DataFrame | None = None,
          drift_b: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per cell both runs measured: per figure A, B, the change, its standard
    error and degrees of freedom (`_spread`), its ± (`*_unc`), p-value (`*_p`), whether it
    lies beyond its own ± uncorrected (`*_beyond`) and whether it is tested
    (`*_tested`; flag() marks the survivors). A figure a run did not record, or a cell
    that failed in either, has no change; a cell either run flagged (`flagged`) is not
    tested. `drift_*`: each run's drift (drift()); without it a run's cells carry their
    own standard errors alone."""
    both = _suffixed(a, "a").merge(_suffixed(b, "b"), on=KEYS)
    for side, moved in (("a", drift_a), ("b", drift_b)):
        moved = (moved if moved is not None else pd.DataFrame()).reindex(
            columns=["pair", "model", "drift_decode_rel", "drift_prefill_rel",
                     "drift_samples"])
        moved = moved.rename(columns={"drift_decode_rel": f"drift_decode_{side}",
                                      "drift_prefill_rel": f"drift_prefill_{side}",
                                      "drift_samples": f"drift_samples_{side}"})
        both = both.merge(moved, on=["pair", "model"], how="left")
    out = both[KEYS].copy()
    out["status_a"], out["status_b"] = both.get("status_a"), both.get("status_b")
    nothing = pd.Series(None, index=both.index)
    out["flagged"] = [any(isinstance(f, str) and f for f in pair) for pair in zip(
        both.get("flags_a", nothing), both.get("flags_b", nothing), strict=True)]
    ok = (both.get("status_a") == "ok") & (both.get("status_b") == "ok")
    lower = _one_pass(both)
    for figure, se, _, _, moved_by in FIGURES:
        va, vb = (numbers(both, f"{figure}_{side}").where(ok) for side in "ab")
        out[f"{figure}_a"], out[f"{figure}_b"] = va, vb
        spread, dof = _spread(both, se, moved_by, {"a": va, "b": vb})
        _test(out, f"{figure}_", vb - va, spread, dof, lower)
        out[f"{figure}_tested"] = out[f"{figure}_p"].notna() & ~out["flagged"]
    return out


def _suffixed(frame: pd.DataFrame, side: str) -> pd.DataFrame:
    """Every column but the cell's keys named for its run, whether or not the other run
    has it (a merge suffixes only the columns both have)."""
    return frame.rename(columns={c: f"{c}_{side}" for c in frame.columns if c not in KEYS})


def _spread(both: pd.DataFrame, se: str, moved_by: str, values: dict[str, pd.Series]
            ) -> tuple[pd.Series, pd.Series]:
    """The standard error of a figure's change between the runs and its
    Welch-Satterthwaite degrees of freedom: in each run the cell's own standard error
    (samples - 1) and either the machine's variation between runs where the summary
    carries it (`between_column`, measured on A/A runs, at the calibration's degrees of
    freedom: it holds the drift within a run too) or else the machine's drift over the
    run (its anchors - 1). NaN where either run has no standard error of its own."""
    ses, dofs = [], []
    for side, value in values.items():
        between = numbers(both, f"{between_column(se)}_{side}")
        # A run with no drift measured, or no between-run term, adds none (0, not NaN).
        drift = numbers(both, f"drift_{moved_by}_{side}").fillna(0) * value
        ses += [numbers(both, f"{se}_{side}"), drift.where(between.isna(), 0.0),
                between.fillna(0)]
        calibration_dof = numbers(both, f"{between_runs.CALIBRATION_DOF}_{side}")
        dofs += [dof_of(numbers(both, f"samples_{side}")),
                 dof_of(numbers(both, f"drift_samples_{side}")),
                 calibration_dof.fillna(intervals.UNBOUNDED)]
    spread, dof = intervals.combined(ses, dofs)
    own = numbers(both, f"{se}_a").notna() & numbers(both, f"{se}_b").notna()
    return (pd.Series(spread, index=both.index, dtype=float).where(own),
            pd.Series(dof, index=both.index, dtype=float))


def _one_pass(both: pd.DataFrame) -> pd.Series:
    """The cells whose ± in either run is one pass's per-token floor (one request, or
    one release): a lower bound (cell_summary's `tokens`)."""
    lower = pd.Series(False, index=both.index)
    for side in "ab":
        source = both.get(f"uncertainty_from_{side}", pd.Series(None, index=both.index))
        lower |= numbers(both, f"samples_{side}").lt(2) | source.eq("tokens")
    return lower


def only_in(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """The cells one run alone measured, and which run."""
    key_a, key_b = (set(map(tuple, f[KEYS].itertuples(index=False))) for f in (a, b))
    rows = [{**dict(zip(KEYS, key, strict=True)), "only in": run}
            for run, keys in (("A", key_a - key_b), ("B", key_b - key_a))
            for key in sorted(keys, key=str)]
    return pd.DataFrame(rows, columns=[*KEYS, "only in"])


# --- the links' costs ----------------------------------------------------------------------
COST_COLUMNS = ["pair", "model", "link", "ctx", "baseline", "compared", "status",
                "status_base", "decode_delta_ms", "decode_delta_se", "decode_delta_dof",
                "decode_lower_bound"]


def link_costs(root: str | Path, summary: pd.DataFrame, moved: pd.DataFrame
               ) -> pd.DataFrame:
    """What each link costs decode in one run (its `summary`, its drift()): the run's link
    comparison (results/summary/comparison.parquet, its `aggregate`'s), with the cost's
    standard error and degrees of freedom (`_cost_spread`). A run aggregated before that
    file was written is compared here as its aggregate would have (comparison.compare_links,
    against the baseline its what-if model names, else cell_summary.pick_baseline's)."""
    written = Path(results.under(root, results.COMPARISON))
    comp = pd.read_parquet(written) if written.exists() else comparison.compare_links(
        summary, baseline_of(root, summary), moved)
    comp["decode_delta_se"], comp["decode_delta_dof"] = _cost_spread(comp, summary)
    return comp.reindex(columns=COST_COLUMNS)


def _cost_spread(comp: pd.DataFrame, summary: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """A link's decode cost's standard error and degrees of freedom, from what
    comparison.compare_links builds its ± of: a paired cell's rounds (rounds - 1), else
    both cells' own standard errors (samples - 1) and the machine's drift over the run
    (its anchors - 1) for each of them."""
    keys = ["pair", "model", "link", "ctx"]
    counts = summary[summary["conc"] == 1].reindex(columns=[*keys, "samples"]) \
        .drop_duplicates(keys)
    # The summary's own counts, whether or not compare_links carried them along.
    rows = comp.drop(columns=["samples", "samples_base"], errors="ignore").merge(
        counts, on=keys, how="left").merge(
        counts.rename(columns={"link": "baseline", "samples": "samples_base"}),
        on=["pair", "model", "baseline", "ctx"], how="left")
    drift_d = numbers(rows, "drift_decode_rel").fillna(0)
    drift_dof = dof_of(numbers(rows, "drift_samples"))
    se, dof = intervals.combined(
        [numbers(rows, "decode_ms_se"), numbers(rows, "decode_ms_se_base"),
         drift_d * numbers(rows, "decode_ms_per_token"),
         drift_d * numbers(rows, "decode_ms_per_token_base")],
        [dof_of(numbers(rows, "samples")), dof_of(numbers(rows, "samples_base")),
         drift_dof, drift_dof])
    own = numbers(rows, "decode_ms_se").notna() & numbers(rows, "decode_ms_se_base").notna()
    se = pd.Series(se, dtype=float).where(own)
    dof = pd.Series(dof, dtype=float)
    paired = numbers(rows, "paired_decode_delta_ms").notna()
    # A paired cost with its run-to-run term where the run was calibrated (another run
    # of the same pair moves it by that much too).
    between = numbers(rows, "paired_decode_between_se")
    calibration_dof = numbers(rows, between_runs.CALIBRATION_DOF)
    paired_se, paired_dof = intervals.combined(
        [numbers(rows, "paired_decode_delta_se"), between.fillna(0)],
        [dof_of(numbers(rows, "paired_rounds")), calibration_dof.fillna(intervals.UNBOUNDED)])
    se = se.where(~paired, pd.Series(paired_se, dtype=float))
    dof = dof.where(~paired, pd.Series(paired_dof, dtype=float))
    return se.set_axis(comp.index), dof.set_axis(comp.index)


def costs(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Each link's decode cost (link_costs) in both runs with its ±, and its change: B's
    less A's, with its standard error, degrees of freedom, ±, p-value and whether it
    lies beyond its own ± (`beyond`, uncorrected), as cells() gives them. A change where
    either side's ± is only a lower bound is not tested (exceeding a lower bound proves
    nothing)."""
    keys = ["pair", "model", "link", "ctx"]
    both = a.merge(b, on=keys, suffixes=("_a", "_b"))
    ok = both[["status_a", "status_base_a", "status_b", "status_base_b"]].eq("ok").all(axis=1)
    out = both[keys].copy()
    for side in "ab":
        out[f"cost_{side}"] = numbers(both, f"decode_delta_ms_{side}").where(ok)
        out[f"se_{side}"] = numbers(both, f"decode_delta_se_{side}").where(ok)
        out[f"dof_{side}"] = numbers(both, f"decode_delta_dof_{side}").fillna(
            intervals.UNBOUNDED)
        out[f"unc_{side}"] = pd.Series(intervals.halfwidth(out[f"se_{side}"],
                                                           out[f"dof_{side}"]), index=out.index)
        out[f"compared_{side}"] = both[f"compared_{side}"]
    se, dof = intervals.combined([out["se_a"], out["se_b"]], [out["dof_a"], out["dof_b"]])
    lower = both["decode_lower_bound_a"].fillna(True).astype(bool) | both[
        "decode_lower_bound_b"].fillna(True).astype(bool)
    _test(out, "", out["cost_b"] - out["cost_a"],
          pd.Series(se, index=out.index, dtype=float).where(out["se_a"].notna()
                                                            & out["se_b"].notna()),
          pd.Series(dof, index=out.index, dtype=float), lower)
    out["tested"] = out["p"].notna()
    return out


# --- the family ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Tally:
    """What one compare tested: how many figures, how many lay beyond their own ±
    uncorrected, how many survived Holm's correction (the ⚠), and how many changes it
    could not test (a cell flagged in either run, a ± only a lower bound, or none)."""

    tested: int
    beyond: int
    survived: int
    untested: int

    def line(self) -> str:
        """The counts beside what chance alone gives: about (1 - LEVEL) of the figures
        tested lie beyond their own ± with nothing changed, while after Holm's
        correction the chance of any ⚠ at all is at most FAMILY_ALPHA."""
        aside = (f"; {self.untested} more change{'s' if self.untested != 1 else ''} not "
                 "tested (a cell flagged in either run, or a ± only a lower bound or none)"
                 if self.untested else "")
        if not self.tested:
            return f"no figure could be tested{aside}"
        return (f"{self.tested} figure{'s' if self.tested != 1 else ''} tested; "
                f"{self.beyond} beyond their own {intervals.LEVEL:.0%} ± (chance alone "
                f"gives about {FAMILY_ALPHA * self.tested:.1f}); {self.survived} after "
                f"Holm's correction ({FAMILY_ALPHA:.0%} family-wise){aside}")


def flag(compared: pd.DataFrame, changed: pd.DataFrame
         ) -> tuple[pd.DataFrame, pd.DataFrame, Tally]:
    """Holm's correction over every figure one compare tests, the cells' (cells()) and
    the links' costs (costs()) together: `*_flag` and `flag` mark the changes that
    survive it, the tables' ⚠. Without it, dozens of figures at 95% each give a ⚠ or
    two with nothing changed."""
    compared, changed = compared.copy(), changed.copy()
    parts = [(compared, f"{figure}_") for figure, *_ in FIGURES] + [(changed, "")]
    p = np.concatenate([frame[f"{prefix}p"].where(frame[f"{prefix}tested"])
                        .to_numpy(dtype=float) for frame, prefix in parts])
    survived, start = holm(p), 0
    tested = beyond = untested = 0
    for frame, prefix in parts:
        frame[f"{prefix}flag"] = survived[start:start + len(frame)]
        start += len(frame)
        mine = frame[f"{prefix}tested"].astype(bool)
        tested += int(mine.sum())
        beyond += int(sum(b is True for b in frame.loc[mine, f"{prefix}beyond"]))
        untested += int((frame[f"{prefix}change"].notna() & ~mine).sum())
    return compared, changed, Tally(tested, beyond, int(survived.sum()), untested)


def between_note(a: pd.DataFrame, b: pd.DataFrame) -> str:
    """What a cell's ± holds between runs: the machine's variation from one run to the
    next where a summary carries it (`*_between_se`), else each run's own spread only,
    which that variation is beyond."""
    found = {run: [title for _, se, title, *_ in FIGURES if between_column(se) in frame
                   and numbers(frame, between_column(se)).notna().any()]
             for run, frame in (("A", a), ("B", b))}
    if not any(found.values()):
        return ("The ± holds only each run's own spread (its cells' samples and its "
                "machine's drift over the run): neither summary carries the machine's "
                "variation from one run to the next (`*_between_se`), so a change within "
                "that variation can still be marked.")
    return ("The ± includes the machine's variation between runs where a summary "
            "carries it (`*_between_se`, at its calibration's degrees of freedom, in "
            "place of the run's drift, which it holds; " + "; ".join(
                f"{run}: {', '.join(titles) or 'none'}" for run, titles in found.items())
            + ").")


# A figure in a headline: a signed or unsigned number, with its decimals.
_FIGURE = re.compile(r"[+\-−]?\d+(?:[.,]\d+)*")


@dataclass
class FindingsChanged:
    """The headlines that say something else in A than in B (`a_only`, `b_only`), how
    many read the same but for their figures (`moved`); or why they were not compared
    (`not_compared`: a run without findings.json, made before findings were data)."""
    a_only: list[str] = field(default_factory=list)
    b_only: list[str] = field(default_factory=list)
    moved: int = 0
    not_compared: str | None = None


def findings_changed(root_a: str | Path, root_b: str | Path) -> FindingsChanged:
    """The two runs' findings' headlines set side by side: a headline whose words
    (figures aside) appear in one run alone says something else; one that reads the same
    but for its figures has moved (the tables say which figures moved beyond chance)."""
    said = []
    for side, root in (("A", root_a), ("B", root_b)):
        found = findings_file.read(results.under(root, results.FINDINGS_DATA))
        if found is None:
            return FindingsChanged(not_compared=(
                f"{side} has no {Path(results.FINDINGS_DATA).name} (its findings were "
                "written before they were data): `snakemake all` there writes it"))
        said.append(findings_file.headlines(found))
    words = [{_FIGURE.sub("#", h) for h in run} for run in said]
    return FindingsChanged(
        [h for h in said[0] if _FIGURE.sub("#", h) not in words[1]],
        [h for h in said[1] if _FIGURE.sub("#", h) not in words[0]],
        sum(1 for h in said[0] if _FIGURE.sub("#", h) in words[1] and h not in said[1]))


def provenance_changed(root_a: str | Path, root_b: str | Path) -> list[str]:
    """What differs in the runs' setup: each pair's builds, each link's facts."""
    lines = []
    builds = [_builds(root) for root in (root_a, root_b)]
    for key in sorted(set(builds[0]) | set(builds[1])):
        va, vb = builds[0].get(key, "not recorded"), builds[1].get(key, "not recorded")
        if va != vb:
            lines.append(f"{key}: {va} → {vb}")
    facts = [_link_facts(root) for root in (root_a, root_b)]
    for key in sorted(set(facts[0]) | set(facts[1])):
        va, vb = facts[0].get(key, "not recorded"), facts[1].get(key, "not recorded")
        if va != vb:
            lines.append(f"{key}: {va} → {vb}")
    return lines


def _builds(root: str | Path) -> dict[str, str]:
    out = {}
    folder = Path(results.under(root, results.TOOLCHAIN.format(pair="-"))).parent
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        for side in ("a", "b"):
            host = record.get(side) or {}
            for fact in BUILD_FACTS:
                if host.get(fact) is not None:
                    out[f"pair {record.get('pair')} host {side.upper()} {fact}"] = \
                        str(host[fact])[:16] if fact.endswith("sha256") else str(host[fact])
    return out


def _link_facts(root: str | Path) -> dict[str, str]:
    files = sorted(str(p) for p in Path(results.under(root, results.LINKS)).glob("*/*.parquet"))
    links = read_links(files)
    out = {}
    for _, row in links.iterrows():
        for fact in LINK_FACTS:
            if fact in row and row[fact] is not None and not (
                    isinstance(row[fact], float) and np.isnan(row[fact])):
                out[f"link {row['pair']}/{row['link']} {fact}"] = str(row[fact])
    return out


def samples_note(a: pd.DataFrame, b: pd.DataFrame) -> str:
    """Where a summary does not say how many samples an ok cell's figures rest on (one
    from before `samples`), their degrees of freedom are unbounded (the normal): said,
    since that gives a narrower ± than a few samples would. Empty where both say."""
    silent = [run for run, frame in (("A", a), ("B", b))
              if numbers(frame[frame.get("status") == "ok"], "samples").isna().any()]
    if not silent:
        return ""
    who = "Neither summary says" if len(silent) == 2 else f"{silent[0]}'s summary does not say"
    return (f"{who} how many samples some cells' figures rest on (no `samples`): their own "
            "standard errors are taken at unbounded degrees of freedom (the normal), a "
            "narrower ± than a few samples would give.")
