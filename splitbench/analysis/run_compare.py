"""Two runs side by side: a results directory against another (a cable, a driver, an MTU
or a llama.cpp version changed between them).

The cells both measured are compared figure by figure: B's less A's, with a ± of
COVERAGE standard errors of that difference (two independent measurements: their
standard errors combined in quadrature); a change beyond its ± is marked. Cells one
run alone has are listed, not compared. The findings whose headline appears in one run
only are listed too, and what differs in the runs' provenance: each pair's llama.cpp
builds and each link's facts (kernel, MTU, negotiated speed, how it was made). What an
older results directory did not record is said, not invented.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from splitbench import results
from splitbench.analysis import checks
from splitbench.analysis.cell_summary import read_links
from splitbench.infra.fits import COVERAGE

# (figure, its standard error, its title, decimals)
FIGURES = [("decode_ms_per_token", "decode_ms_se", "decode (ms/token)", 3),
           ("prefill_tps", "prefill_tps_se", "prefill (tok/s)", 1),
           ("ttft_ms", "ttft_ms_se", "TTFT (ms)", 1)]
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


def cells(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """One row per cell both runs measured: per figure A, B, the change and its ±, and
    whether the change lies beyond it (`*_beyond`); a figure a run did not record, or
    a cell that failed in either, has no change."""
    both = a.merge(b, on=KEYS, suffixes=("_a", "_b"))
    out = both[KEYS].copy()
    out["status_a"], out["status_b"] = both.get("status_a"), both.get("status_b")
    ok = (both.get("status_a") == "ok") & (both.get("status_b") == "ok")
    for figure, se, _, _ in FIGURES:
        va, vb = (_number(both, f"{figure}_{side}") for side in "ab")
        change = (vb - va).where(ok)
        unc = COVERAGE * np.hypot(_number(both, f"{se}_a"), _number(both, f"{se}_b"))
        out[f"{figure}_a"], out[f"{figure}_b"] = va.where(ok), vb.where(ok)
        out[f"{figure}_change"], out[f"{figure}_unc"] = change, unc.where(ok)
        out[f"{figure}_beyond"] = (change.abs() > unc).where(change.notna() & unc.notna())
    return out


def _number(frame: pd.DataFrame, column: str) -> pd.Series:
    if column not in frame:
        return pd.Series(np.nan, index=frame.index)
    return pd.to_numeric(frame[column], errors="coerce")


def only_in(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """The cells one run alone measured, and which run."""
    key_a, key_b = (set(map(tuple, f[KEYS].itertuples(index=False))) for f in (a, b))
    rows = [{**dict(zip(KEYS, key, strict=True)), "only in": run}
            for run, keys in (("A", key_a - key_b), ("B", key_b - key_a))
            for key in sorted(keys, key=str)]
    return pd.DataFrame(rows, columns=[*KEYS, "only in"])


def findings_changed(root_a: str | Path, root_b: str | Path) -> tuple[list[str], list[str]]:
    """The findings' headlines in A alone and in B alone (figures included: a headline
    whose number moved is in both lists)."""
    said = []
    for root in (root_a, root_b):
        path = Path(results.under(root, results.FINDINGS))
        said.append(checks.headlines(path.read_text()) if path.exists() else [])
    return ([h for h in said[0] if h not in said[1]], [h for h in said[1] if h not in said[0]])


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
    for figure, _, title, places in FIGURES:
        out[f"{title} A"] = compared[f"{figure}_a"].map(lambda v, p=places: _fixed(v, p))
        out[f"{title} B"] = compared[f"{figure}_b"].map(lambda v, p=places: _fixed(v, p))
        out[f"{title} change"] = [
            _change(c, u, beyond, places) for c, u, beyond in zip(
                compared[f"{figure}_change"], compared[f"{figure}_unc"],
                compared[f"{figure}_beyond"], strict=True)]
    failed = (compared["status_a"] != "ok") | (compared["status_b"] != "ok")
    out["status"] = [f"{a} → {b}" if bad else "ok" for a, b, bad in zip(
        compared["status_a"], compared["status_b"], failed, strict=True)]
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
    counted = [compared[f"{figure}_beyond"].dropna().astype(bool).sum()
               for figure, *_ in FIGURES]
    comparable = [compared[f"{figure}_beyond"].notna().sum() for figure, *_ in FIGURES]
    beyond, total = int(sum(counted)), int(sum(comparable))
    share = f" ({100 * (total - beyond) / total:.0f}% within their ±)" if total else ""
    return (f"{len(compared)} cells in both runs; {beyond} of {total} figures with a ± "
            f"changed beyond it{share}.")
