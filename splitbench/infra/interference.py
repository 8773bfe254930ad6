"""What else used the machines while a cell ran, and which cells that makes suspect.

A cell's figures are only the link's and the model's when nothing else competed for the
CPUs. Around each measurement, `Window` reads each machine's cumulative CPU counters
(`sensors.cpu_counters`: /proc/stat, /proc/pressure/cpu, and the CPU time of the
measurement's own processes) at its start and end, on host A and host B (over SSH for a
remote B). From the differences, per host side:

cpu_pressure_{side}_pct      share of the time some task waited for a CPU (PSI "some")
own_cpu_pressure_{side}_pct  the same for the measurement's own processes alone: they
                             wait in a cgroup of their own (sensors.own_cgroup), whose
                             PSI counts only its members; None where none could be made
foreign_cpu_{side}_cores     CPU used by processes that are not the measurement's, in cores
steal_{side}_pct             share of CPU time the hypervisor gave to someone else
own_cpu_{side}_cores         the measurement's own processes (servers, relay, client)
foreign_top_{side}           the other processes that used the most of it: name, pid
                             and cores (the busiest three), so a flag names its cause

`flag` turns them into a reason per cell with the configured thresholds
(`interference:` in the config); a cell without figures is "not checked", never clean.
CPU pressure counts against the limit without the measurement's own: vLLM's API server,
engine and worker waiting for each other on one core are the measurement, not
interference (`others_pressure`).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

import pandas as pd

from splitbench.contracts.slices import InterferenceLimits
from splitbench.infra import proc_stat, procs
from splitbench.infra.hosts import Host, HostError
from splitbench.infra.telemetry import SENSORS_SOURCE
from splitbench.remote import sensors

SIDES = ("a", "b")
# The limits' defaults lie between what a quiet run and a run beside busy loops read
# (docs/method.md, "Interference"). PSI counts the measurement's own processes waiting
# for each other too: on two cores they do.
# Each figure and its unit; a column is f"{figure}_{side}_{unit}".
UNITS = {"cpu_pressure": "pct", "own_cpu_pressure": "pct", "foreign_cpu": "cores",
         "steal": "pct", "own_cpu": "cores"}
# Every column the meter and the sampler give per side: request rows, summary, links.
COLUMNS = [*(f"{figure}_{side}_{unit}" for side in SIDES for figure, unit in UNITS.items()),
           *(f"cpu_pressure_{side}_peak_pct" for side in SIDES),
           *(f"foreign_top_{side}" for side in SIDES),
           *(f"interference_{side}" for side in SIDES)]
# How many of the other processes `foreign_top_{side}` names, and the least CPU it names.
TOP_OTHERS = 3
TOP_OTHERS_MIN_CORES = 0.005


# One machine's figures (`sum_figures`); "{side}" in a name is filled in per host side.
MachineFigures = TypedDict("MachineFigures", {
    "cpu_pressure_{side}_pct": float | None,
    "own_cpu_pressure_{side}_pct": float | None,
    "foreign_cpu_{side}_cores": float | None,
    "steal_{side}_pct": float | None,
    "own_cpu_{side}_cores": float | None,
    "foreign_top_{side}": str | None,  # e.g. "stress-ng (pid 812) 0.98 cores"
    "interference_{side}": str,  # what was read, or why nothing was
})


class InterferenceFigures(TypedDict, total=False):
    """`Meter.figures`: a MachineFigures per host side it meters (COLUMNS but the peaks)."""

    cpu_pressure_a_pct: float | None
    own_cpu_pressure_a_pct: float | None
    foreign_cpu_a_cores: float | None
    steal_a_pct: float | None
    own_cpu_a_cores: float | None
    foreign_top_a: str | None
    interference_a: str
    cpu_pressure_b_pct: float | None
    own_cpu_pressure_b_pct: float | None
    foreign_cpu_b_cores: float | None
    steal_b_pct: float | None
    own_cpu_b_cores: float | None
    foreign_top_b: str | None
    interference_b: str


class CounterSums(TypedDict, total=False):
    """One machine's counter differences summed over a Meter's stretches (`Meter._add`)."""

    seconds: float
    hz: int
    psi_some_us: int | None
    own_psi_some_us: int | None
    busy_ticks: int | None
    steal_ticks: int | None
    total_ticks: int | None
    own_ticks: int | None
    own_cgroup: str | None  # the first stretch's word on the own cgroup
    others: dict[str, list] | None  # "pid:start" -> [name, ticks] used in the stretches


def across(column: str) -> str | Callable[[pd.Series], str | None]:
    """How a figure's worst over several stretches (a cell's repeats) is taken: the
    highest, but the measurement's own pressure the lowest, so that the pressure of
    others (the machine's less the own) is never below any repeat's; the names of the
    busiest other processes, each repeat's (`named`)."""
    if column.startswith("foreign_top"):
        return named
    return "min" if column.startswith("own_cpu_pressure") else "max"


def named(texts: pd.Series) -> str | None:
    """Several stretches' `foreign_top`, each distinct one once."""
    found = dict.fromkeys(t for t in texts if isinstance(t, str) and t)
    return "; ".join(found) or None


@dataclass(frozen=True)
class Own:
    """The measurement's processes per host side, and those of them that run their work
    in processes of their own (vLLM's ranks: engine and workers), whose living
    descendants are the measurement's too."""

    pids: dict[str, list[int]]
    trees: dict[str, list[int]] = field(default_factory=dict)
    cgroup: str | None = None  # the name of their cgroup (sensors.own_cgroup)


def _counters(host: Host, pids: list[int], trees: list[int],
              cgroup: str | None = None) -> sensors.CpuCounters | None:
    """One machine's CPU counters, with the CPU time of `pids` and of `trees` with their
    descendants, and (`cgroup`: its name) the CPU pressure of them alone, in a cgroup
    of their own that this puts them into; None when unreadable."""
    if not host.remote:  # a namespace shares the machine's
        path, done = sensors.own_cgroup(cgroup, pids, trees) if cgroup else (None, None)
        if path:
            procs.record_cgroup(path)
        # Over the CPUs this job may run on, as B's reader counts B's: where the run is
        # held to some CPUs (a second machine's test on one computer), the others are
        # another machine's, not this host's foreign work.
        return {**sensors.cpu_counters(pids, trees, path, os.sched_getaffinity(0),
                                       others=True), "own_cgroup": done}
    argv = [host.python, "-c", SENSORS_SOURCE, "--pids", ",".join(map(str, pids)),
            "--trees", ",".join(map(str, trees)), *(["--cgroup", cgroup] if cgroup else []),
            "--others"]
    try:
        result = host.run(argv, check=False)
        counters = json.loads(result.stdout.splitlines()[-1])["cpu"]
    except (HostError, IndexError, KeyError, ValueError):
        return None
    if counters.get("own_cgroup_path"):
        procs.record_cgroup(counters["own_cgroup_path"], host.ssh_settings())
    return counters


class Meter:
    """CPU counters of each machine over one or more stretches of measuring.

    `stretch(pids)` reads the counters before and after a block that measures; `pids`
    maps each host side to the measurement's process ids on its machine at that time
    (a stretch per launch: a cell that switches launches has other servers in each).
    Hosts that share a machine (the embedded lab) are read once, with both sides'
    pids. `figures()` turns the sums of all stretches into the figures per side.
    """

    def __init__(self, hosts: Mapping[str, Host]) -> None:
        self.machine_of = {side: host.ssh or "local" for side, host in hosts.items()}
        self.hosts: dict[str, Host] = {}
        for side, host in hosts.items():
            self.hosts.setdefault(self.machine_of[side], host)
        self.sums: dict[str, CounterSums | None] = {key: {} for key in self.hosts}
        # The stretch now open: per machine, its counters at the start and whose they are.
        self.open: dict[str, tuple[sensors.CpuCounters | None, list[int], list[int],
                                   str | None]] = {}

    @contextlib.contextmanager
    def stretch(self, own: Own) -> Iterator[None]:
        mine: dict[str, list[int]] = {key: [] for key in self.hosts}
        trees: dict[str, list[int]] = {key: [] for key in self.hosts}
        for side, ids in own.pids.items():
            mine[self.machine_of[side]].extend(ids)
        for side, ids in own.trees.items():
            trees[self.machine_of[side]].extend(ids)
        self.open = {key: (_counters(host, mine[key], trees[key], own.cgroup), mine[key],
                           trees[key], own.cgroup) for key, host in self.hosts.items()}
        try:
            yield
        finally:
            for key, host in self.hosts.items():
                before, pids, tree, cgroup = self.open[key]
                self.sums[key] = self._added(key, self.sums[key], before,
                                             _counters(host, pids, tree, cgroup))
            self.open = {}

    def so_far(self) -> InterferenceFigures:
        """`figures()` as they stand now: the stretch still open read up to this moment
        (another reading of each machine's counters; over SSH for a remote one, whose
        reader, an interpreter's start, then counts as other work in the stretch's own
        figures: tens of milliseconds of CPU, read at a cell's checkpoints only)."""
        sums = dict(self.sums)
        for key, (before, pids, tree, cgroup) in self.open.items():
            now = _counters(self.hosts[key], pids, tree, cgroup)
            sums[key] = self._added(key, copy.deepcopy(sums[key]), before, now)
        return self._figures(sums)

    def others_at_work(self, limits: InterferenceLimits | None) -> str | None:
        """Why other programs' work so far would flag the measurement (`flag` with
        `limits`), or None: nothing over a limit, or nothing read."""
        reason = flag(pd.DataFrame([self.so_far()]), limits or {},
                      during="the requests so far")["interference"].iloc[0]
        return reason if isinstance(reason, str) else None

    def _added(self, key: str, sums: CounterSums | None, before: sensors.CpuCounters | None,
               after: sensors.CpuCounters | None) -> CounterSums | None:
        """`sums` with one stretch's differences added (None: unknown from now on)."""
        if sums is None:
            return None
        if before is None or after is None:
            return None  # one unreadable stretch: the figures are unknown
        sums["seconds"] = sums.get("seconds", 0.0) + after["t_mono"] - before["t_mono"]
        sums["hz"] = after.get("hz") or 100
        for name in ("psi_some_us", "own_psi_some_us", "busy_ticks", "steal_ticks",
                     "total_ticks"):
            a, b = before.get(name), after.get(name)
            sums[name] = None if a is None or b is None or sums.get(name, 0) is None \
                else sums.get(name, 0) + b - a
        # What the own cgroup is, or why there is none (the first stretch's word).
        sums.setdefault("own_cgroup", after.get("own_cgroup"))
        # A process of the measurement that ended inside the stretch (a crash) takes its
        # CPU time with it: the rest would look foreign. Unknown then, not a guess.
        a, b = before.get("own_ticks"), after.get("own_ticks")
        same = before.get("own_found") == after.get("own_found")
        # Over SSH the reading is a process of its own, started inside the stretch: its
        # CPU (the interpreter's start) is the measurement's, not another's.
        reader = after.get("self_ticks", 0) if self.hosts[key].remote else 0
        sums["own_ticks"] = None if a is None or b is None or not same \
            or sums.get("own_ticks", 0) is None else sums.get("own_ticks", 0) + b - a + reader
        sums["others"] = _others_added(sums.get("others", {}), before.get("others"),
                                       after.get("others"))
        # The sshd processes of the SSH connection the readings of a remote host came
        # through carry the measurement's commands, sampler and readings: its own work
        # (each process present at both ends: a new connection's count from the next).
        if sums["own_ticks"] is not None:
            ends = before.get("connection") or {}, after.get("connection") or {}
            sums["own_ticks"] += sum(ticks - ends[0][key] for key, ticks in ends[1].items()
                                     if key in ends[0])
        return sums

    def figures(self) -> InterferenceFigures:
        """Per side: the figures above, and `interference_{side}` saying what was read."""
        return self._figures(self.sums)

    def _figures(self, sums: Mapping[str, CounterSums | None]) -> InterferenceFigures:
        out: InterferenceFigures = {}
        for key in self.hosts:
            figures = sum_figures(sums[key])
            for side, machine in self.machine_of.items():
                if machine == key:
                    out.update({name.format(side=side): v for name, v in figures.items()})
        return out


def _others_added(sums: dict[str, list] | None, before: dict[str, list] | None,
                  after: dict[str, list] | None) -> dict[str, list] | None:
    """`sums` with each other process's CPU over one stretch added: its ticks at the end
    less those at the start (a process started inside the stretch from none). A
    process that ended inside it is missing: its CPU moved to the parent that reaped
    it, or is lost with it (so the names are the likely causes, not a full account).
    None where a reading lacked them (a B whose reader predates them)."""
    if sums is None or before is None or after is None:
        return None
    for key, (name, ticks) in after.items():
        used = ticks - before.get(key, [name, 0])[1]
        if used > 0:
            total = sums.setdefault(key, [name, 0])
            total[1] += used
    return sums


def top_others(others: dict[str, list] | None, hz: int, seconds: float) -> str | None:
    """The other processes that used the most CPU, busiest first: "name (pid N) 0.98
    cores"; None where they were not read or none used `TOP_OTHERS_MIN_CORES`."""
    if not others or seconds <= 0:
        return None
    busiest = sorted(others.items(), key=lambda item: -item[1][1])[:TOP_OTHERS]
    named = [f"{name} (pid {key.split(':')[0]}) {ticks / hz / seconds:.2f} cores"
             for key, (name, ticks) in busiest if ticks / hz / seconds >= TOP_OTHERS_MIN_CORES]
    return ", ".join(named) or None


def own_processes(pair: str, local_pids: list[int]) -> Own:
    """The measurement's processes on each host: this process (and `local_pids`, its
    helpers on this machine) on A, and every process recorded for the pair (servers and
    the delay relay record their pair; iperf3 and the probe too), on the host it runs on;
    a server recorded as a process group (vLLM's ranks) with its descendants. A record
    on this machine whose process is gone (its pid reused since) is left out: its pid
    goes into the pair's cgroup. The cgroup's name is the pair's and this run's."""
    own = Own({"a": [os.getpid(), *local_pids], "b": []}, {"a": [], "b": []},
              cgroup_name(pair))
    for record in procs.all_procs():
        if record.get("pair") == pair:
            if not record.get("remote") and \
                    proc_stat.start_time(record["pid"]) != record.get("start_time"):
                continue
            side = "b" if record.get("host") == "b" else "a"
            (own.trees if record.get("group") else own.pids)[side].append(record["pid"])
    return own


def cgroup_name(pair: str) -> str:
    """The cgroup of a pair's measurement in this run (its state directory): two runs on
    one machine, or two pairs, never share one."""
    run = hashlib.sha256(str(procs.state_dir()).encode()).hexdigest()[:8]
    return f"splitbench-{pair}-{run}"


def sum_figures(sums: CounterSums | None) -> MachineFigures:
    """The figures of one machine from its summed counter differences (names with
    {side})."""
    out: MachineFigures = {f"{f}_{{side}}_{unit}": None for f, unit in UNITS.items()}
    out["foreign_top_{side}"] = None
    if sums is None:
        out["interference_{side}"] = "unreadable"
        return out
    seconds = sums.get("seconds", 0.0)
    if seconds <= 0:
        out["interference_{side}"] = "not measured"
        return out
    found = []
    if sums.get("psi_some_us") is not None:
        out["cpu_pressure_{side}_pct"] = round(sums["psi_some_us"] / (seconds * 1e6) * 100, 2)
        found.append("PSI")
    if sums.get("own_psi_some_us") is not None:
        out["own_cpu_pressure_{side}_pct"] = round(
            sums["own_psi_some_us"] / (seconds * 1e6) * 100, 2)
        found.append(f"own PSI in {sums.get('own_cgroup')}")
    elif sums.get("own_cgroup"):
        found.append(f"own PSI unknown: {sums['own_cgroup']}")
    busy, own, hz = sums.get("busy_ticks"), sums.get("own_ticks"), sums["hz"]
    if busy is not None:
        found.append("/proc/stat")
        if own is not None:
            out["own_cpu_{side}_cores"] = round(own / hz / seconds, 3)
            out["foreign_cpu_{side}_cores"] = round(max(busy - own, 0) / hz / seconds, 3)
            out["foreign_top_{side}"] = top_others(sums.get("others"), hz, seconds)
        if sums.get("steal_ticks") is not None and sums.get("total_ticks"):
            out["steal_{side}_pct"] = round(sums["steal_ticks"] / sums["total_ticks"] * 100, 2)
    out["interference_{side}"] = (f"read over {seconds:.1f} s: {', '.join(found)}"
                                  if found else "no CPU counters on this host")
    return out


# ---------------------------------------------------------------- judging cells


def settings(given: InterferenceLimits | None) -> dict[str, float | None]:
    """The `interference:` thresholds with defaults filled in (null: not checked)."""
    from splitbench import configuration  # pydantic: only for the stages that judge

    return {**configuration.defaults(configuration.Interference), **(given or {})}


# (figure, its limit's key, its text with the value's places, the unit)
LIMITS = [("cpu_pressure", "max_cpu_pressure_pct", "CPU pressure {v}%", 0, "%"),
          ("foreign_cpu", "max_foreign_cpu_cores", "other processes used {v} cores", 2,
           " cores"),
          ("steal", "max_steal_pct", "steal {v}%", 0, "%")]


def above(value: float, limit: float, places: int) -> str:
    """`value` to `places` decimals, or to as many more as it takes not to read as the
    limit it exceeds (0.254 cores against a limit of 0.25, not "0.25")."""
    for digits in range(places, places + 4):
        text = f"{value:.{digits}f}"
        if float(text) != limit:
            return text
    return f"{value:.{places + 4}f}"


def flag(cells: pd.DataFrame, thresholds: InterferenceLimits,
         during: str = "the cell") -> pd.DataFrame:
    """Per cell (one row each, the summary's figures; `during`: what a row measured):
    `interference` (why the cell is
    suspect, or None), and `interference_checked` with `interference_missing` (why
    not): a cell counts as checked only when every host's foreign CPU was measured (the
    figure that tells others' work from the measurement's own); otherwise it is
    reported as not checked, never as clean."""
    cfg = settings(thresholds)
    reasons: list[str | None] = []
    missing: list[str | None] = []
    for _, row in cells.iterrows():
        parts = []
        for figure, key, text, places, unit in LIMITS:
            values = {side: (others_pressure(row, side) if figure == "cpu_pressure" else
                             row.get(f"{figure}_{side}_{UNITS[figure]}")) for side in SIDES}
            values = {side: v for side, v in values.items() if v is not None and not pd.isna(v)}
            limit = cfg[key]
            over = {side: v for side, v in values.items() if limit is not None and v > limit}
            # Hosts that share a machine (the embedded lab) read the same figures: once.
            by_value: dict[float, list[str]] = {}
            for side, value in over.items():
                by_value.setdefault(value, []).append(side.upper())
            for value, sides in by_value.items():
                hosts = f"host {sides[0]}" if len(sides) == 1 else f"hosts {' and '.join(sides)}"
                said = text.format(v=above(value, limit, places))
                top = row.get(f"foreign_top_{sides[0].lower()}")
                named = f"; the most: {top}" if figure == "foreign_cpu" and \
                    isinstance(top, str) and top else ""
                own = row.get(f"own_cpu_pressure_{sides[0].lower()}_pct")
                if figure == "cpu_pressure" and own is not None and not pd.isna(own):
                    said += f" from other programs (the measurement's own {own:.0f}% aside)"
                parts.append(f"{hosts}: {said} (limit {limit:g}{unit}{named})")
        reasons.append("; ".join(parts) + f" during {during}" if parts else None)
        unmeasured = [side for side in SIDES if pd.isna(row.get(f"foreign_cpu_{side}_cores"))]
        missing.append("interference not measured on " + ", ".join(
            f"host {side.upper()} ({_why(row.get(f'interference_{side}'))})"
            for side in unmeasured) if unmeasured else None)
    return pd.DataFrame({"interference": reasons,
                         "interference_checked": [m is None for m in missing],
                         "interference_missing": missing}, index=cells.index)


def others_pressure(row: Mapping[str, Any], side: str) -> float | None:
    """The CPU pressure that other programs put on a host: the machine's PSI less the
    measurement's own (its cgroup's), never below 0; the machine's where the own is
    unknown (no cgroup could be made, or measured before there was one). The two are
    not strictly a set difference (PSI weighs each CPU by how busy the group kept it),
    hence the floor."""
    machine = row.get(f"cpu_pressure_{side}_pct")
    if machine is None or pd.isna(machine):
        return None
    own = row.get(f"own_cpu_pressure_{side}_pct")
    return float(machine) if own is None or pd.isna(own) else max(float(machine) - own, 0.0)


def _why(text: Any) -> str:
    return text if isinstance(text, str) and text else "no figures: measured before " \
        "splitbench recorded them"
