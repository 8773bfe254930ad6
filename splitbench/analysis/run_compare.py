"""Two runs side by side: a results directory against another (a cable, a driver, an MTU
or a llama.cpp version changed between them).

The cells both measured are compared figure by figure: B's less A's, with a ± of
COVERAGE standard errors of that difference: two measurements made at different times,
so each one's own standard error and the machine's drift over its run (the spread of
its drift anchors' repeats, comparison.machine_drift: what the run's own sequential
comparisons allow for) combined in quadrature; a change beyond its ± is marked, and a
cell either run flagged (other work on the CPUs) is said to be. Cells one
run alone has are listed, not compared. The findings whose headline appears in one run
only are listed too, and what differs in the runs' provenance: each pair's llama.cpp
builds and each link's facts (kernel, MTU, negotiated speed, how it was made). What an
older results directory did not record is said, not invented.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from splitbench import results
from splitbench.analysis import checks, comparison
from splitbench.analysis.cell_summary import read_links
from splitbench.analysis.traffic import numbers
from splitbench.infra.fits import COVERAGE

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
    comparison.pick_baseline's."""
    model = Path(results.under(root, results.WHATIF))
    named = pd.read_parquet(model)["baseline"] if model.exists() else pd.Series([])
    return comparison.pick_baseline(summary, named.iloc[0] if len(named) else None)


def cells(a: pd.DataFrame, b: pd.DataFrame, drift_a: pd.DataFrame | None = None,
          drift_b: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per cell both runs measured: per figure A, B, the change and its ±, and
    whether the change lies beyond it (`*_beyond`); a figure a run did not record, or
    a cell that failed in either, has no change. `drift_*`: each run's drift (drift());
    without it a run's cells carry their own standard errors alone. `flagged`: either
    run flagged the cell."""
    both = a.merge(b, on=KEYS, suffixes=("_a", "_b"))
    for side, moved in (("a", drift_a), ("b", drift_b)):
        moved = moved if moved is not None else pd.DataFrame(
            columns=["pair", "model", "drift_decode_rel", "drift_prefill_rel"])
        moved = moved.rename(columns={f"drift_{f}_rel": f"drift_{f}_{side}"
                                      for f in ("decode", "prefill")})
        both = both.merge(moved[["pair", "model", f"drift_decode_{side}",
                                 f"drift_prefill_{side}"]], on=["pair", "model"], how="left")
    out = both[KEYS].copy()
    out["status_a"], out["status_b"] = both.get("status_a"), both.get("status_b")
    out["flagged"] = [any(isinstance(f, str) and f for f in pair) for pair in zip(
        both.get("flags_a", pd.Series(None, index=both.index)),
        both.get("flags_b", pd.Series(None, index=both.index)), strict=True)]
    ok = (both.get("status_a") == "ok") & (both.get("status_b") == "ok")
    for figure, se, _, _, moved_by in FIGURES:
        va, vb = (numbers(both, f"{figure}_{side}") for side in "ab")
        change = (vb - va).where(ok)
        spread = [np.hypot(numbers(both, f"{se}_{side}"),
                           numbers(both, f"drift_{moved_by}_{side}").fillna(0) * value)
                  for side, value in (("a", va), ("b", vb))]
        unc = COVERAGE * np.hypot(*spread)
        out[f"{figure}_a"], out[f"{figure}_b"] = va.where(ok), vb.where(ok)
        out[f"{figure}_change"], out[f"{figure}_unc"] = change, unc.where(ok)
        out[f"{figure}_beyond"] = (change.abs() > unc).where(change.notna() & unc.notna())
    return out


def only_in(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """The cells one run alone measured, and which run."""
    key_a, key_b = (set(map(tuple, f[KEYS].itertuples(index=False))) for f in (a, b))
    rows = [{**dict(zip(KEYS, key, strict=True)), "only in": run}
            for run, keys in (("A", key_a - key_b), ("B", key_b - key_a))
            for key in sorted(keys, key=str)]
    return pd.DataFrame(rows, columns=[*KEYS, "only in"])


def link_costs(root: str | Path, summary: pd.DataFrame, moved: pd.DataFrame
               ) -> pd.DataFrame:
    """What each link costs decode in one run (its `summary`, its drift()): its
    single-stream cells against the baseline link's (comparison.compare_links), as the
    run's link comparison table reads them. The baseline is the one the run's what-if
    model names, else comparison.pick_baseline's."""
    comp = comparison.compare_links(summary, baseline_of(root, summary), moved)
    return comp.reindex(columns=COST_COLUMNS)


COST_COLUMNS = ["pair", "model", "link", "ctx", "baseline", "compared", "status",
                "status_base", "decode_delta_ms", "decode_delta_unc_ms",
                "decode_lower_bound"]


def costs(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Each link's decode cost (link_costs) in both runs, and its change: B's less A's,
    ± the two uncertainties combined. `beyond` is NA where either side's ± is only a
    lower bound and the change exceeds it (exceeding a lower bound proves nothing)."""
    keys = ["pair", "model", "link", "ctx"]
    both = a.merge(b, on=keys, suffixes=("_a", "_b"))
    ok = both[["status_a", "status_base_a", "status_b", "status_base_b"]].eq("ok").all(axis=1)
    out = both[keys].copy()
    for side in "ab":
        out[f"cost_{side}"] = numbers(both, f"decode_delta_ms_{side}").where(ok)
        out[f"unc_{side}"] = numbers(both, f"decode_delta_unc_ms_{side}").where(ok)
        out[f"compared_{side}"] = both[f"compared_{side}"]
    out["change"] = out["cost_b"] - out["cost_a"]
    out["unc"] = np.hypot(out["unc_a"], out["unc_b"])
    lower = both["decode_lower_bound_a"].fillna(True).astype(bool) | both[
        "decode_lower_bound_b"].fillna(True).astype(bool)
    outside = out["change"].abs() > out["unc"]
    known = out["change"].notna() & out["unc"].notna()
    # Python's True, False or None, as cells() gives: costs_table asks `is True`.
    out["beyond"] = [bool(o) if k and not (o and lo) else None
                     for o, k, lo in zip(outside, known, lower, strict=True)]
    return out


def costs_table(changed: pd.DataFrame) -> pd.DataFrame:
    """costs() as a person reads it: ⚠ where the change lies beyond its ±."""
    out = changed[["pair", "model", "link", "ctx"]].copy()
    for side in "ab":
        out[f"decode cost {side.upper()} (ms/token)"] = [
            _change(c, u, None, 2) for c, u in zip(changed[f"cost_{side}"],
                                                  changed[f"unc_{side}"], strict=True)]
    out["change"] = [
        _change(c, u, beyond, 2) + (" (± a lower bound)" if beyond is None
                                    and np.isfinite(c) else "")
        for c, u, beyond in zip(changed["change"], changed["unc"], changed["beyond"],
                                strict=True)]
    out["compared (A; B)"] = [a if a == b else f"{a}; {b}" for a, b in zip(
        changed["compared_a"], changed["compared_b"], strict=True)]
    return out


# A figure in a headline: a signed or unsigned number, with its decimals.
_FIGURE = re.compile(r"[+\-−]?\d+(?:[.,]\d+)*")


def findings_changed(root_a: str | Path, root_b: str | Path
                     ) -> tuple[list[str], list[str], int]:
    """The findings' headlines that say something else in A than in B: those whose
    words (figures aside) appear in A alone, those in B alone, and how many read the
    same but for their figures (the tables above say which figures moved beyond ±)."""
    said = []
    for root in (root_a, root_b):
        path = Path(results.under(root, results.FINDINGS))
        said.append(checks.headlines(path.read_text()) if path.exists() else [])
    words = [{_FIGURE.sub("#", h) for h in run} for run in said]
    moved = sum(1 for h in said[0] if _FIGURE.sub("#", h) in words[1] and h not in said[1])
    return ([h for h in said[0] if _FIGURE.sub("#", h) not in words[1]],
            [h for h in said[1] if _FIGURE.sub("#", h) not in words[0]], moved)


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


# --- as text -------------------------------------------------------------------------------
def cells_table(compared: pd.DataFrame) -> pd.DataFrame:
    """The cells both measured, as a person reads them: each figure's A, B and change ±,
    ⚠ where the change lies beyond its ±."""
    out = compared[KEYS].copy()
    for figure, _, title, places, _ in FIGURES:
        out[f"{title} A"] = compared[f"{figure}_a"].map(lambda v, p=places: _fixed(v, p))
        out[f"{title} B"] = compared[f"{figure}_b"].map(lambda v, p=places: _fixed(v, p))
        out[f"{title} change"] = [
            _change(c, u, beyond, places) for c, u, beyond in zip(
                compared[f"{figure}_change"], compared[f"{figure}_unc"],
                compared[f"{figure}_beyond"], strict=True)]
    failed = (compared["status_a"] != "ok") | (compared["status_b"] != "ok")
    out["status"] = [f"{a} → {b}" if bad else "⚠ flagged" if flagged else "ok"
                     for a, b, bad, flagged in zip(
                         compared["status_a"], compared["status_b"], failed,
                         compared["flagged"], strict=True)]
    return out


def _fixed(value: float, places: int) -> str:
    return "—" if not np.isfinite(value) else f"{value:.{places}f}"


def _change(change: float, unc: float, beyond: object, places: int) -> str:
    if not np.isfinite(change):
        return "—"
    text = f"{change:+.{places}f}" + (f" ±{unc:.{places}f}" if np.isfinite(unc) else
                                       " (no ±)")
    return f"⚠ {text}" if beyond is True else text


def summary_line(compared: pd.DataFrame) -> str:
    """How many figures changed beyond their ±, of those that could be compared."""
    quiet = compared[~compared["flagged"]]
    counted = [quiet[f"{figure}_beyond"].dropna().astype(bool).sum()
               for figure, *_ in FIGURES]
    comparable = [quiet[f"{figure}_beyond"].notna().sum() for figure, *_ in FIGURES]
    beyond, total = int(sum(counted)), int(sum(comparable))
    share = f" ({100 * (total - beyond) / total:.0f}% within their ±)" if total else ""
    flagged = int(compared["flagged"].sum())
    aside = (f"; {flagged} cell{'s' if flagged != 1 else ''} flagged in either run, "
             "counted apart" if flagged else "")
    if flagged and flagged == len(compared):
        return (f"{len(compared)} cells in both runs, every one flagged in one run or the "
                "other: none is counted (the table marks each).")
    return (f"{len(compared)} cells in both runs{aside}; {beyond} of {total} figures with "
            f"a ± changed beyond it{share}.")
