"""What else used the machines while a cell ran, and which cells that makes suspect.

A cell's figures are only the link's and the model's when nothing else competed for the
CPUs. Around each measurement, `Window` reads each machine's cumulative CPU counters
(`sensors.cpu_counters`: /proc/stat, /proc/pressure/cpu, and the CPU time of the
measurement's own processes) at its start and end, on host A and host B (over SSH for a
remote B). From the differences, per host side:

cpu_pressure_{side}_pct    share of the time some task waited for a CPU (PSI "some")
foreign_cpu_{side}_cores   CPU used by processes that are not the measurement's, in cores
steal_{side}_pct           share of CPU time the hypervisor gave to someone else
own_cpu_{side}_cores       the measurement's own processes (servers, relay, client)

`flag` turns them into a reason per cell with the configured thresholds
(`interference:` in the config); a cell without figures is "not checked", never clean.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from splitbench import sensors
from splitbench.hosts import Host, HostError
from splitbench.telemetry import SENSORS_SOURCE

SIDES = ("a", "b")
# Defaults, from the embedded lab on a 2-core machine (README, "Interference"): a quiet
# run's cells stayed below them; two busy loops beside the run went far above.
DEFAULTS: dict[str, float | None] = {
    "max_cpu_pressure_pct": 25.0,
    "max_foreign_cpu_cores": 0.25,
    "max_steal_pct": 10.0,
}
FIGURES = ["cpu_pressure", "foreign_cpu", "steal", "own_cpu"]


def _counters(host: Host, pids: list[int]) -> dict[str, Any] | None:
    """One machine's CPU counters, with `pids`' CPU time; None when unreadable."""
    if not host.remote:
        return sensors.cpu_counters(pids)  # a namespace shares the machine's counters
    argv = [host.python, "-c", SENSORS_SOURCE, "--pids", ",".join(map(str, pids))]
    try:
        result = host.run(argv, check=False)
        return json.loads(result.stdout.splitlines()[-1])["cpu"]
    except (HostError, IndexError, KeyError, ValueError):
        return None


class Window:
    """CPU counters of each machine from `start` (construction) to `finish`.

    `pids` maps each host side to the measurement's process ids on its machine; hosts
    that share a machine (the embedded lab) are read once, with both sides' pids.
    """

    def __init__(self, hosts: Mapping[str, Host], pids: Mapping[str, list[int]]) -> None:
        self.machine_of = {side: host.ssh or "local" for side, host in hosts.items()}
        self.hosts: dict[str, Host] = {}
        self.pids: dict[str, list[int]] = {}
        for side, host in hosts.items():
            key = self.machine_of[side]
            self.hosts.setdefault(key, host)
            self.pids.setdefault(key, []).extend(pids.get(side, []))
        self.start = {key: _counters(host, self.pids[key]) for key, host in self.hosts.items()}

    def finish(self) -> dict[str, Any]:
        """Per side: the figures above, and `interference_{side}` saying what was read."""
        out: dict[str, Any] = {}
        for key, host in self.hosts.items():
            figures = window_figures(self.start[key], _counters(host, self.pids[key]))
            for side, machine in self.machine_of.items():
                if machine == key:
                    out.update({name.format(side=side): v for name, v in figures.items()})
        return out


def window_figures(before: dict[str, Any] | None,
                   after: dict[str, Any] | None) -> dict[str, Any]:
    """The figures of one machine between two counter readings (names with {side})."""
    out: dict[str, Any] = {f"{f}_{{side}}_{unit}": None for f, unit in
                           zip(FIGURES, ("pct", "cores", "pct", "cores"), strict=True)}
    if before is None or after is None:
        out["interference_{side}"] = "unreadable"
        return out
    seconds = after["t_mono"] - before["t_mono"]
    if seconds <= 0:
        out["interference_{side}"] = "no time passed"
        return out
    found = []

    def delta(name: str) -> float | None:
        a, b = before.get(name), after.get(name)
        return None if a is None or b is None else b - a

    psi = delta("psi_some_us")
    if psi is not None:
        out["cpu_pressure_{side}_pct"] = round(psi / (seconds * 1e6) * 100, 2)
        found.append("PSI")
    busy, own, total = delta("busy_ticks"), delta("own_ticks"), delta("total_ticks")
    hz = after.get("hz") or 100
    if busy is not None:
        found.append("/proc/stat")
        # A process of the measurement that ended inside the window (a crash) takes
        # its CPU time with it: the rest would look foreign. Unknown then, not a guess.
        same = before.get("own_found") == after.get("own_found")
        if own is not None and same:
            out["own_cpu_{side}_cores"] = round(own / hz / seconds, 3)
            out["foreign_cpu_{side}_cores"] = round(max(busy - own, 0) / hz / seconds, 3)
        steal = delta("steal_ticks")
        if steal is not None and total:
            out["steal_{side}_pct"] = round(steal / total * 100, 2)
    out["interference_{side}"] = (f"read over {seconds:.1f} s: {', '.join(found)}"
                                  if found else "no CPU counters on this host")
    return out


# ---------------------------------------------------------------- judging cells


def settings(given: Mapping[str, Any] | None) -> dict[str, float | None]:
    """The `interference:` thresholds with defaults filled in (null: not checked)."""
    return {**DEFAULTS, **(given or {})}


def flag(cells: pd.DataFrame, thresholds: Mapping[str, Any]) -> pd.DataFrame:
    """Per cell (one row each, the summary's figures): `interference` (why the cell is
    suspect, or None) and `interference_checked` (False where no figure was measured:
    the cell is then reported as not checked, not as clean)."""
    cfg = settings(thresholds)
    limits = [("cpu_pressure", "max_cpu_pressure_pct", "CPU pressure {v:.0f}%", "%"),
              ("foreign_cpu", "max_foreign_cpu_cores", "other processes used {v:.2f} cores",
               " cores"),
              ("steal", "max_steal_pct", "steal {v:.0f}%", "%")]
    reasons: list[str | None] = []
    checked: list[bool] = []
    for _, row in cells.iterrows():
        parts, seen = [], False
        for side in SIDES:
            for figure, key, text, unit in limits:
                column = f"{figure}_{side}_{'cores' if unit == ' cores' else 'pct'}"
                value = row.get(column)
                if value is None or pd.isna(value):
                    continue
                seen = True
                limit = cfg[key]
                if limit is not None and value > limit:
                    parts.append(f"host {side.upper()}: {text.format(v=value)} "
                                 f"(limit {limit:g}{unit})")
        checked.append(seen)
        reasons.append("; ".join(dict.fromkeys(parts)) + " during the cell" if parts else None)
    return pd.DataFrame({"interference": reasons, "interference_checked": checked},
                        index=cells.index)


def worst(values: pd.Series) -> float:
    """The largest figure of a cell's repeats (NaN when none was measured)."""
    numbers = pd.to_numeric(values, errors="coerce")
    return float(numbers.max()) if numbers.notna().any() else np.nan
