"""Host sensors: sysfs temperatures, NVML absence, and the sampler around a cell."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from splitbench.infra import interference, teardown, telemetry
from splitbench.infra.hosts import Host
from splitbench.remote import sensors
from tests.conftest import ROOT, ends_within, running
from tests.support.gpu import nvml_says


def test_reads_thermal_zones_and_hwmon(tmp_path):
    zone = tmp_path / "class/thermal/thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "temp").write_text("45500\n")
    hwmon = tmp_path / "class/hwmon/hwmon2"
    hwmon.mkdir(parents=True)
    (hwmon / "temp1_input").write_text("61000\n")
    (hwmon / "temp2_input").write_text("garbage\n")
    found = sensors.temperatures_c(str(tmp_path))
    assert found == {"thermal:thermal_zone0": 45.5, "hwmon:hwmon2:temp1_input": 61.0}


def _loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])




def test_reading_says_what_it_found():
    before = _loadavg()
    reading = sensors.reading()
    # The kernel's one-minute load, as /proc/loadavg has it to two decimals (it changes
    # every 5 s: the reading lies with the value before it or the one after).
    assert any(abs(reading["load1"] - load) <= 0.006 for load in (before, _loadavg())), (
        reading["load1"], before)
    temps = sensors.temperatures_c()
    assert reading["temp_sources"] == (",".join(sorted(temps)) or "none found")
    assert reading["temp_max_c"] == (max(temps.values()) if temps else None)
    found, count = nvml_says()
    assert reading["gpu_sources"] == found
    assert len(reading["gpus"]) == count
    gpus, found_again = sensors.gpus()
    assert (found_again, len(gpus)) == (found, count)


def test_sampler_covers_both_sides_with_one_process_on_one_machine():
    local = Host("local")
    sampler = telemetry.Sampler({"a": local, "b": local}, every_s=0.1)
    assert len(sampler.processes) == 1
    # Wait for two readings during the "cell", however long the sampler takes to start
    # on a busy machine (a fixed sleep measured the machine, not the sampler).
    out = sampler.outputs["local"].fileno()
    deadline = time.monotonic() + 60
    while os.pread(out, 1 << 16, 0).count(b"\n") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    figures = sampler.finish()
    assert figures["sensor_readings_a"] >= 4  # before, two or more during, after
    assert figures["sensor_readings_b"] == figures["sensor_readings_a"]
    # A machine without sensors says so and has no temperatures (this VM); one with
    # them has a before temperature.
    no_sensors = figures["sensors_a"].startswith("none found")
    assert (figures["temp_a_before_c"] is None) == no_sensors, figures
    assert all(p.poll() is not None for p in sampler.processes.values())


def test_peaks_cover_before_during_and_after():
    def reading(temp, gpu_temp=None, power=None):
        gpus = [] if gpu_temp is None else [{"temp_c": gpu_temp, "power_w": power,
                                             "memory_used_mib": 100.0}]
        return {"temp_max_c": temp, "temp_sources": "thermal:thermal_zone0", "load1": 0.5,
                "gpus": gpus, "gpu_sources": "NVML: 1 GPU(s)"}

    figures = telemetry._figures(reading(40.0, 50, 90.0),
                                 [reading(47.5, 61, 250.0), reading(None)],
                                 reading(44.0, 55, 120.0))
    assert figures["temp_{side}_before_c"] == 40.0
    assert figures["temp_{side}_after_c"] == 44.0
    assert figures["temp_{side}_peak_c"] == 47.5  # a reading during the cell
    assert figures["gpu_{side}_temp_peak_c"] == 61
    assert figures["gpu_{side}_power_peak_w"] == 250.0
    assert figures["sensor_readings_{side}"] == 4


def test_a_sampler_stops_when_its_parent_is_killed(tmp_path):
    """After a kill -9 of the cell job, its sampler must not sample forever."""
    out = tmp_path / "readings"
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys, time\n"
         f"p = subprocess.Popen([sys.executable, '-m', 'splitbench.remote.sensors', '--every', "
         f"'0.1'], stdout=open({str(out)!r}, 'w'))\n"
         "print(p.pid, flush=True)\n"
         "time.sleep(120)\n"],
        stdout=subprocess.PIPE, text=True)
    sampler = int(parent.stdout.readline())
    deadline = time.monotonic() + 10
    while not out.exists() or not out.read_text():
        assert time.monotonic() < deadline, "the sampler wrote nothing"
        time.sleep(0.05)
    assert running(sampler)
    parent.kill()
    parent.wait()
    assert ends_within(sampler, 5)


def test_a_servers_own_cpu_includes_the_workers_it_started():
    """A server that computes in child processes (vLLM's engine and workers): their CPU
    is the server's own, counted through the process it was started as. The child burns
    a fixed 0.5 s of CPU between the two readings, however long a busy machine makes
    that take, and stays alive until it is read."""
    busy = ("import sys, time\nsys.stdin.readline()\nend = time.process_time() + 0.5\n"
            "while time.process_time() < end: pass\nprint('done', flush=True)\n"
            "sys.stdin.readline()\n")
    # A shell gives a background child /dev/null for stdin: fd 3 hands it the pipe, so
    # that it reads "go" and "end" and outlives the second reading (and the last write).
    parent = subprocess.Popen(["sh", "-c", f'exec 3<&0; {sys.executable} -c "$0" <&3 3<&- & '
                               "wait", busy],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        before = sensors.cpu_counters([], trees=[parent.pid])
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline() == "done\n"
        after = sensors.cpu_counters([], trees=[parent.pid])
        alone = sensors.cpu_counters([parent.pid])
        parent.stdin.write("end\n")
        parent.stdin.close()
    finally:
        parent.wait(timeout=30)
    assert before["own_found"] == after["own_found"] == 1
    seconds = (after["own_ticks"] - before["own_ticks"]) / after["hz"]
    assert seconds >= 0.45, seconds  # the child's 0.5 s of CPU, to a tick or so
    # Without the tree, only the process itself (a shell waiting): the child is not its.
    assert alone["own_ticks"] < after["own_ticks"]


BUSY = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass\n"


def _loops(n: int, seconds: float) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BUSY.format(s=seconds)])
            for _ in range(n)]


@pytest.mark.slow  # three busy loops for 3 s: the fast tier must stay under 2 minutes
def test_own_cpu_pressure_is_the_measurements_alone(tmp_path, monkeypatch):
    """Three busy loops on this machine's cores, once as the measurement's own (in its
    cgroup) and once as another program's: the machine's pressure is high both times,
    the measurement's own only the first, and only the second is flagged."""
    monkeypatch.setenv("SPLITBENCH_STATE", str(tmp_path / "state"))
    name = interference.cgroup_name("selftest")
    if sensors.own_cgroup(name, [], [])[0] is None:
        pytest.skip(sensors.own_cgroup(name, [], [])[1])
    local = Host("a")
    figures = {}
    try:
        # Another program's first: once this process is in the cgroup, every process it
        # starts is born there (as a server's workers are).
        for whose in ("other", "own"):
            loops = _loops(3, 1.5)
            # This process too, as a cell job measuring in-process is: the teardown
            # moves it out before it removes the cgroup.
            own = interference.Own({"a": [os.getpid(), *(p.pid for p in loops)]
                                    if whose == "own" else []}, {"a": []}, name)
            meter = interference.Meter({"a": local})
            time.sleep(0.1)
            with meter.stretch(own):
                time.sleep(1.0)
            for loop in loops:
                loop.wait(timeout=10)
            figures[whose] = meter.figures()
    finally:
        for line in teardown.teardown():
            print(line)
    assert not Path(sensors.cgroup2_root() / name).exists()  # removed by the teardown
    assert f"::/{name}" not in Path("/proc/self/cgroup").read_text()
    mine, other = figures["own"], figures["other"]
    assert mine["cpu_pressure_a_pct"] > 20 and other["cpu_pressure_a_pct"] > 20, figures
    # Three loops on at most two cores wait in the cgroup: most of the machine's waiting.
    assert mine["own_cpu_pressure_a_pct"] > 0.6 * mine["cpu_pressure_a_pct"], mine
    assert other["own_cpu_pressure_a_pct"] < 5, other
    flags = interference.flag(pd.DataFrame([{**mine, "foreign_cpu_a_cores": 0.0},
                                            {**other, "foreign_cpu_a_cores": 0.0}]),
                              {"max_cpu_pressure_pct": 15})
    assert pd.isna(flags.iloc[0]["interference"]), flags
    assert "from other programs" in flags.iloc[1]["interference"], flags


def test_a_host_held_to_some_cpus_counts_those_cpus_alone():
    """A host whose processes may run on CPUs 1 and 3 only (a test's second machine on
    this one) counts their lines of /proc/stat, not the whole machine's: work on CPUs 0
    and 2 is another machine's. A host on every CPU counts the machine's line."""
    stat = ("cpu  100 0 50 1000 0 0 0 0 0 0\n"
            "cpu0 40 0 20 200 0 0 0 0 0 0\ncpu1 10 0 5 300 0 0 0 0 0 0\n"
            "cpu2 40 0 20 200 0 0 0 0 0 0\ncpu3 10 0 5 300 0 0 0 0 0 0\n"
            "intr 12345\nctxt 678\n")
    assert sensors._cpu_fields(stat, {1, 3}) == [20, 0, 10, 600, 0, 0, 0, 0, 0, 0]
    assert sensors._cpu_fields(stat, {0, 1, 2, 3}) == [100, 0, 50, 1000, 0, 0, 0, 0, 0, 0]
    # The reader a host runs over SSH counts the CPUs it may run on.
    held = subprocess.run(["taskset", "-c", "0", sys.executable, "-m",
                           "splitbench.remote.sensors"],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(held.stdout.splitlines()[-1])["cpu"]["ncpu"] == 1


def test_the_meter_reads_another_programs_work_while_its_stretch_is_open():
    """What the early-stopping rule asks at a checkpoint (`Meter.others_at_work`): the
    counters up to now, inside the stretch. A busy loop that is not the measurement's
    is over the foreign-CPU limit, and the reason names it (by pid: it is no process of
    the measurement's); once it has ended, a fresh stretch reads quiet."""
    meter = interference.Meter({"a": Host("a")})
    limits = {"max_foreign_cpu_cores": 0.25, "max_cpu_pressure_pct": None,
              "max_steal_pct": None}
    with meter.stretch(interference.Own({"a": [os.getpid()]}, {"a": []})):
        loop = _loops(1, 1.0)[0]
        time.sleep(0.8)
        busy = meter.others_at_work(limits)
    loop.wait(timeout=10)  # after the stretch: a reaped child's CPU is its parent's
    assert busy and "other processes used" in busy and "the requests so far" in busy, busy
    assert "; the most: " in busy, busy
    # The open stretch was read, not closed: the finished one holds its whole second.
    # Other work on the machine only adds to these (the loop need not be the first).
    figures = meter.figures()
    assert figures["foreign_cpu_a_cores"] > 0.25, figures
    assert f"(pid {loop.pid})" in figures["foreign_top_a"], figures["foreign_top_a"]
    # A fresh stretch after the loop ended does not count it (what else is at work on
    # the machine, it may: a quiet machine reads None here).
    calm = interference.Meter({"a": Host("a")})
    with calm.stretch(interference.Own({"a": [os.getpid()]}, {"a": []})):
        time.sleep(0.5)
        calm.others_at_work(limits)
    assert f"(pid {loop.pid})" not in (calm.figures()["foreign_top_a"] or ""), calm.so_far()



# A parent that starts a child burning 0.5 s of CPU, passes on its "done", reaps it when
# told, says so, and lives on until told again.
REAPER = """
import subprocess, sys
busy = ("import sys, time\\nend = time.process_time() + 0.5\\n"
        "while time.process_time() < end: pass\\nprint('done', flush=True)\\n"
        "sys.stdin.readline()\\n")
child = subprocess.Popen([sys.executable, "-c", busy], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
print(child.stdout.readline(), end="", flush=True)
sys.stdin.readline()
child.stdin.write("end\\n")
child.stdin.close()
child.wait()
print("reaped", flush=True)
sys.stdin.readline()
"""


def test_a_process_that_reaps_a_busy_child_is_not_named_for_the_childs_cpu():
    """Another program's CPU between two readings is what it did itself: a parent (init,
    for an orphan) that reaps a child gains the child's whole life's CPU at once, which
    is no work it did between the readings (read so, init was named at 11.9 cores on a
    2-core machine)."""
    parent = subprocess.Popen([sys.executable, "-c", REAPER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline() == "done\n"
        before = sensors._others(sensors._processes(), set())
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline() == "reaped\n"
        after = sensors._others(sensors._processes(), set())
        stat = Path(f"/proc/{parent.pid}/stat").read_text().rsplit(")", 1)[1].split()
        reaped = (int(stat[13]) + int(stat[14])) / os.sysconf("SC_CLK_TCK")
        parent.stdin.write("end\n")
        parent.stdin.close()
    finally:
        parent.wait(timeout=30)
    assert reaped >= 0.4, reaped  # the child's CPU is now the parent's cutime + cstime...
    key = next(k for k in after if k.startswith(f"{parent.pid}:"))
    used = (after[key][1] - before.get(key, ["", 0])[1]) / os.sysconf("SC_CLK_TCK")
    assert used < 0.2, used  # ...and not the parent's own work between the readings
