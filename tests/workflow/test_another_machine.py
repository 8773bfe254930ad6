"""A real pair whose host B is another machine: its own root filesystem (no venv, no
llama.cpp build), reached as the unprivileged user `bench`, whose only rights are the
sudoers line the doctor prints (tests/support/separate_host.py makes that B)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from splitbench.infra import privilege
from splitbench.infra.hosts import host_from_spec
from tests.conftest import needs_root
from tests.support.ordinary_user import OrdinaryUser
from tests.support.separate_host import config_block, separate_host_b  # noqa: F401 (a fixture)
from tests.support.workflow_run import NO_SOCKPERF, SNAKEMAKE, workflow_copy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), needs_root()]

# A second cable between the two: a veth pair of its own, addressed by the run.
SECOND = {"interface_a": "sbhb-a2", "interface_b": "sbhb-b2", "addr_a": "10.214.22.1",
          "addr_b": "10.214.22.2", "prefix": 30}
# Files of B's own user that are not the run's, though named like its own.
PLANTED = ["/tmp/splitbench-rpc x\ny.log", "/tmp/keep me", "/dev/shm/vllm shm\nz",
           "/dev/shm/psm_keep"]


def rig(b: dict) -> dict:
    first = {"interface_a": b["interface_a"], "interface_b": b["interface_b"],
             "addr_a": b["addr_a"], "addr_b": b["addr_b"], "prefix": b["prefix"]}
    return {
        "measurement_version": 1, "toolchain": {"source": "pip"},
        "pairs": {"rig": {"mode": "ssh", "hosts": {"a": {}, "b": config_block(b)},
                          "links": {"cable1": first, "cable2": SECOND}}},
        "baseline_link": "cable1",
        "models": {"tiny": {"synthetic": {
            "n_layer": 2, "n_embd": 64, "n_head": 4, "n_head_kv": 2, "n_ff": 128,
            "n_vocab": 1024, "context_length": 4096, "seed": 1}, "layers_on_b": 1}},
        "contexts": {"short": 32}, "concurrency": [1],
        # Requests of 96 tokens: at 24 (15 ms each) one anchor's five requests spread
        # 13%, and a fresh clone's run read that as a 12-14% drift of the block.
        "cell": {"n_predict": 96, "single_stream_seconds": 0, "concurrent_seconds": 0},
        "link_check": {"iperf_seconds": 1, "rr_sizes": [64, 16384], "rr_samples": 40,
                       **NO_SOCKPERF},
    }


def second_cable(b: dict) -> None:
    """The second link's veth pair, B's end in B's namespace, both ends down and bare."""
    subprocess.run(["ip", "link", "del", SECOND["interface_a"]], capture_output=True)
    subprocess.run(["ip", "link", "add", SECOND["interface_a"], "type", "veth", "peer",
                    "name", SECOND["interface_b"], "netns", b["netns"]], check=True)


def grant_as_the_doctor_says(bad: str, root: str | None = None) -> tuple[str, str]:
    """Do as root what the doctor's ✗ line says (`root`: B's root directory, where the
    command runs chrooted): install the helper, and write the sudoers line; the two."""
    install = bad.split("as root there: ", 1)[1].split(", then visudo", 1)[0]
    sudoers = bad.split("visudo -f /etc/sudoers.d/splitbench: ", 1)[1].split(" — ")[0]
    if root is not None:
        subprocess.run(["chroot", root, "sh", "-c", install], check=True)
        granted = f"{root}/etc/sudoers.d/splitbench"
        with open(granted, "w") as line:
            line.write(sudoers + "\n")
        os.chmod(granted, 0o440)
    return install, sudoers


class RootWatch(threading.Thread):
    """Reads B's process table over SSH as bench, every 0.3 s, while the run goes on:
    any process run as root there other than sshd, sudo, the root helper and the ip and
    nft it runs."""

    def __init__(self, b: dict) -> None:
        super().__init__(daemon=True)
        self.host = host_from_spec("b", config_block(b))
        self.seen: set[str] = set()
        self.reads = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            table = self.host.run(["ps", "-eo", "uid=,args="], check=False).stdout
            self.reads += 1
            for line in table.splitlines():
                uid, _, args = line.strip().partition(" ")
                if uid == "0" and not args.startswith((
                        "sshd", "/usr/sbin/sshd", "sudo ", "/usr/sbin/ip ", "/usr/sbin/nft ",
                        f"/usr/bin/python3 -I {privilege.HELPER} ")) \
                        and not self.ending(args):
                    self.seen.add(args)
            time.sleep(0.3)

    @staticmethod
    def ending(args: str) -> bool:
        """One of the same, caught as it ends: ps shows a process whose command line is
        gone by its name in brackets ("[sshd]" while a session's process exits, then
        "[sshd] <defunct>" until its parent reaps it)."""
        ended = re.fullmatch(r"\[([\w.-]+)\]( <defunct>)?", args)
        return bool(ended) and ended.group(1) in ("nft", "ip", "sudo", "sshd", "python3",
                                                  "splitbench-root")


NEIGHBOUR = "sb-lanhb"  # a machine on B's other network ("the LAN")


def neighbour_beside(b: dict) -> str:
    """A third namespace on B's other side: a veth into B's namespace, and routes to both
    cables' subnets through B, as a neighbour on B's LAN would have."""
    subprocess.run(["ip", "netns", "delete", NEIGHBOUR], capture_output=True)
    for argv in (["netns", "add", NEIGHBOUR],
                 ["link", "add", "sbhb-lan", "type", "veth", "peer", "name", "lan0",
                  "netns", NEIGHBOUR],
                 ["link", "set", "sbhb-lan", "netns", b["netns"]],
                 ["-n", b["netns"], "addr", "add", "10.214.31.1/24", "dev", "sbhb-lan"],
                 ["-n", b["netns"], "link", "set", "sbhb-lan", "up"],
                 ["-n", NEIGHBOUR, "addr", "add", "10.214.31.2/24", "dev", "lan0"],
                 ["-n", NEIGHBOUR, "link", "set", "lan0", "up"],
                 ["-n", NEIGHBOUR, "route", "add", "10.214.20.0/30", "via", "10.214.31.1"],
                 ["-n", NEIGHBOUR, "route", "add", "10.214.22.0/30", "via", "10.214.31.1"]):
        subprocess.run(["ip", *argv], check=True)
    return NEIGHBOUR


def reaches(ns: str, addr: str, port: int) -> str:
    """What a TCP connection from `ns` to addr:port meets: accepted, refused, dropped."""
    code = ("import socket,sys\ns=socket.socket();s.settimeout(0.5)\n"
            "try:\n s.connect((sys.argv[1],int(sys.argv[2])));print('accepted')\n"
            "except ConnectionRefusedError:\n print('refused')\n"
            "except OSError:\n print('dropped')\n")
    return subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code, addr,
                           str(port)], capture_output=True, text=True).stdout.strip()


class NeighbourWatch(threading.Thread):
    """From B's LAN, tries the run's RPC worker port on both link addresses every 0.3 s
    while the run goes on, and notes each try made while B's worker listened there."""

    def __init__(self, b: dict, work, addresses: list[str]) -> None:
        super().__init__(daemon=True)
        self.b, self.work, self.addresses = b, work, addresses
        self.met: list[str] = []  # what each try made while the worker listened met
        self.done = threading.Event()

    def run(self) -> None:
        blocks = self.work / ".splitbench/ports.json"
        while not self.done.is_set():
            if blocks.exists():
                port = json.loads(blocks.read_text())["rig"]  # the first worker's
                listening = subprocess.run(["ip", "netns", "exec", self.b["netns"], "ss",
                                            "-Hltn"], capture_output=True, text=True).stdout
                for addr in self.addresses:
                    if f"{addr}:{port} " in listening:
                        self.met.append(reaches(NEIGHBOUR, addr, port))
            time.sleep(0.3)


def assert_every_check_ok(work) -> None:
    """Every check ok, but for a drift of the block that nothing measured explains: the
    machine's own pace over a minute (a fresh clone's slow tier read +22% once, with no
    interference on either host), which the check flags and this test does not own."""
    said = (work / "results/checks.txt").read_text().splitlines()
    drift = "splitbench check flagged: drift: "
    assert said and all(line.startswith("splitbench check ok:") or (
        line.startswith(drift) and "interference" not in line) for line in said), said
    assert "splitbench check ok: interference: none above the limits" in "\n".join(said)


def test_a_run_on_another_machine_as_an_ordinary_user_reaches_the_report_and_leaves_b_as_it_was(
        separate_host_b, tmp_path):  # noqa: F811 (the fixture)
    b = separate_host_b()  # no sudo rights yet
    host = host_from_spec("b", config_block(b))
    second_cable(b)
    for path in PLANTED:
        host.run(["sh", "-c", 'echo planted > "$1"', "sh", path])
    work = workflow_copy(tmp_path)
    (work / "rig.yaml").write_text(yaml.safe_dump(rig(b), sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k != "SPLITBENCH_STATE"}  # its own
    doctor = [sys.executable, "-m", "splitbench", "doctor", "--configfile", "rig.yaml"]

    # Without rights the doctor names the missing ones and says how to install the root
    # helper and the sudoers line that names it alone; those are all B needs.
    refused = subprocess.run(doctor, cwd=work, env=env, capture_output=True, text=True,
                             timeout=300)
    assert refused.returncode == 1, refused.stdout
    (bad,) = [line for line in refused.stdout.splitlines() if line.startswith("✗")]
    assert (f"not root on host B, and sudo -n runs neither {privilege.HELPER} nor ip, nft "
            "or tee /dev/cpu_dma_latency for bench" in bad), bad
    install, sudoers = grant_as_the_doctor_says(bad, b["root"])
    # The helper's copy the doctor put on B, in bench's home; installed by root as is.
    assert install == ("install -o root -g root -m 0755 /home/bench/.cache/splitbench/"
                       f"splitbench-root {privilege.HELPER}"), install
    assert sudoers == f"bench ALL=(root) NOPASSWD: {privilege.HELPER}", sudoers
    ready = subprocess.run(doctor, cwd=work, env=env, capture_output=True, text=True,
                           timeout=300)
    assert ready.returncode == 0, ready.stdout
    for said in ("✓ rig: host B: addresses for links cable1, cable2, the firewall guard and "
                 f"holding the CPUs' wake-up latency through {privilege.HELPER} (fixed "
                 "verbs, through sudo -n for bench; no root login)",
                 "✓ rig: host B has no build of its own: host A's worker runs there"):
        assert said in ready.stdout, ready.stdout

    # B's LAN neighbour reaches B before the run (its sshd on the link address)...
    neighbour_beside(b)
    assert reaches(NEIGHBOUR, b["addr_b"], 22) == "accepted"
    lan = NeighbourWatch(b, work, [b["addr_b"], SECOND["addr_b"]])
    lan.start()
    watch = RootWatch(b)
    watch.start()
    # Host A's side on CPU 0, B's on CPU 1: two machines' CPUs, as the meters count them.
    run = subprocess.run(["taskset", "-c", "0", SNAKEMAKE, "--cores", "1", "all",
                          "--configfile", "rig.yaml", "--replace-workflow-config"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=900)
    for thread in (watch, lan):
        thread.done.set()
        thread.join(timeout=30)
    subprocess.run(["ip", "netns", "delete", NEIGHBOUR], capture_output=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert watch.reads >= 10 and not watch.seen, (watch.reads, watch.seen)
    # ... but never the RPC worker while it listened on either cable.
    assert len(lan.met) >= 3 and set(lan.met) == {"dropped"}, lan.met

    assert_every_check_ok(work)
    summary = pd.read_parquet(work / "results/summary/cells.parquet")
    assert sorted(summary["link"]) == ["cable1", "cable2"]
    assert (summary["status"] == "ok").all(), summary[["link", "status"]]
    assert summary["flags"].isna().all(), summary["flags"].tolist()
    # The round trips behind the verdicts were counted on this pair, in its own cells'
    # RPC packets (one worker: one per token), and the what-if says so.
    turns = summary["rpc_turns_per_token"]
    assert ((turns - 1).abs() <= 0.2).all(), turns.tolist()
    model = pd.read_parquet(work / "results/summary/whatif.parquet")
    assert (model["round_trips_from"] == "counted from the RPC packets").all(), model
    toolchain = (work / "results/toolchain/rig.json").read_text()
    assert "carried from host A" in toolchain
    assert (work / "results/report.html").stat().st_size > 0

    # B as it was: no process of the run, no file of it (the carried worker included)
    # but the workers' tensor cache, kept for the next run (empty: this model's tensors
    # are under the 10 MiB a cached one needs) until `teardown --purge`; no table, the
    # second cable's address gone; the planted files untouched.
    table = host.run(["ps", "-eo", "args="]).stdout.splitlines()
    assert all(args.startswith(("sshd", "/usr/sbin/sshd", "ps ", "/bin/sh -c ps "))
               for args in table), table
    assert host.run(["ls", "-A", "/home/bench"]).stdout.split() == [".cache", ".ssh"]
    kept = sorted(host.run(["find", "/home/bench/.cache", "-mindepth", "1"]).stdout.split())
    assert kept == ["/home/bench/.cache/splitbench", "/home/bench/.cache/splitbench/rpc-tensors",
                    "/home/bench/.cache/splitbench/rpc-tensors/rig",
                    "/home/bench/.cache/splitbench/rpc-tensors/rig/rpc"], kept
    purged = subprocess.run([sys.executable, "-m", "splitbench", "teardown", "--purge"],
                            cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert ("removed the tensor cache /home/bench/.cache/splitbench/rpc-tensors on host b"
            in purged.stdout), purged.stdout + purged.stderr
    assert host.run(["find", "/home/bench/.cache", "-mindepth", "1"]).stdout.split() == []
    left = host.run(["find", "/tmp", "/dev/shm", "-mindepth", "1", "-print0"]).stdout
    assert sorted(left.split("\0")[:-1]) == sorted(PLANTED)
    for path in PLANTED:
        assert host.run(["cat", path]).stdout == "planted\n"
    # B's tables, read as root (bench's line runs the helper alone, which lists them too).
    tables = subprocess.run(["nsenter", "-t", str(b["init_pid"]), "-n", "nft", "list",
                             "tables"], capture_output=True, text=True, check=True).stdout
    assert "splitbench" not in tables, tables
    assert host.run(["sudo", "-n", privilege.HELPER, "guard-list"]).stdout.strip() == "{}"
    addresses = host.run(["ip", "-br", "addr", "show", "dev", SECOND["interface_b"]]).stdout
    assert SECOND["addr_b"] not in addresses, addresses


class RootOnA(threading.Thread):
    """Reads host A's process table every 0.3 s while the run goes on: any process as
    root (effective uid 0) that the user's run started, other than sudo and what the
    sudoers line allows; and the user's servers, seen running as the user."""

    ALLOWED = ("sudo ", "/usr/bin/ip ", "/usr/sbin/ip ", "/usr/sbin/nft ",
               f"/usr/bin/python3 -I {privilege.HELPER} ")

    def __init__(self, uid: int) -> None:
        super().__init__(daemon=True)
        self.uid = uid
        self.seen: set[str] = set()
        self.servers: set[str] = set()  # what the user's llama.cpp processes were
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            table = {}
            for proc in Path("/proc").iterdir():
                try:
                    status = (proc / "status").read_text()
                    args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                except (OSError, ValueError):
                    continue
                fields = dict(line.split(":\t", 1) for line in status.splitlines()
                              if ":\t" in line)
                table[proc.name] = (fields["PPid"].strip(), int(fields["Uid"].split()[1]),
                                    args.strip())
            for parent, euid, args in table.values():
                if euid == self.uid and "llama-server" in args:
                    self.servers.add("llama-server")
                if euid != 0 or args.startswith(self.ALLOWED) or not args:
                    continue
                while parent in table:  # started, at some remove, by the user's run?
                    parent, owner, _ = table[parent]
                    if owner == self.uid:
                        self.seen.add(args)
                        break
            time.sleep(0.3)


def test_a_run_by_an_ordinary_user_on_host_a_reaches_the_report_with_every_check_ok(
        separate_host_b, tmp_path):  # noqa: F811 (the fixture)
    """No root on either host: host A's user has the root helper and the sudoers line
    its doctor prints, and the packet helper root installed for it, no more; the run
    reaches the report with every check ok, the wake-up latency held and the round
    trips counted on both hosts, and no process of the run was root on A but the root
    helper and what it runs. (B keeps the older line, ip and nft themselves: it still
    works, and the doctor calls it root-equivalent.)"""
    b = separate_host_b(sudoers="bench ALL=(root) NOPASSWD: /usr/bin/ip, /usr/sbin/nft, "
                                "/usr/bin/tee /dev/cpu_dma_latency")
    second_cable(b)
    user = OrdinaryUser.make(Path(tempfile.mkdtemp(prefix="sb-user-a-", dir="/tmp")))
    try:
        work = workflow_copy(user.base)
        keys = user.base / "keys"  # the user's copy of what reaches B
        keys.mkdir()
        for key in ("identity", "known_hosts"):
            b[key] = str(shutil.copy(b[key], keys))
        (work / "rig.yaml").write_text(yaml.safe_dump(rig(b), sort_keys=False))
        user.own(work, keys)
        doctor = ["python", "-m", "splitbench", "doctor", "--configfile", "rig.yaml"]
        refused = user.run(doctor, work)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        (bad,) = [line for line in refused.stdout.splitlines() if line.startswith("✗")]
        assert f"not root on host A, and sudo -n runs neither {privilege.HELPER} nor ip, " \
               "nft or tee /dev/cpu_dma_latency for alice" in bad, bad
        assert "· rig: host A: no packet socket (not root, no packet helper)" \
            in refused.stdout
        install, sudoers = grant_as_the_doctor_says(bad)
        user.grant(sudoers)
        helper = [["sh", "-c", install],
                  [sys.executable, "-m", "splitbench", "packet-helper", "--user", user.name]]
        ready = user.run(doctor, work, as_root_first=helper)
        assert ready.returncode == 0, ready.stdout + ready.stderr
        for said in (f"✓ rig: host A: addresses for links cable1, cable2, the firewall guard "
                     f"and holding the CPUs' wake-up latency through {privilege.HELPER} "
                     "(fixed verbs, through sudo -n for alice; no root login)",
                     "✓ rig: host B: ip, nft, tee /dev/cpu_dma_latency as root through sudo "
                     "-n for bench; root-equivalent: sudo runs ip and nft with any "
                     "arguments for bench",
                     "✓ rig: host A has a packet socket, the packet helper's",
                     "· rig: host A: CPU wake-up latency can be held at 0 us"):
            assert said in ready.stdout, ready.stdout

        watch = RootOnA(user.uid)
        watch.start()
        run = user.run(["taskset", "-c", "0", "snakemake", "--cores", "1", "all",
                        "--configfile", "rig.yaml", "--replace-workflow-config"], work,
                       as_root_first=helper)
        watch.done.set()
        watch.join(timeout=30)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert not watch.seen, watch.seen
        assert watch.servers == {"llama-server"}  # it was watching the user's run

        assert_every_check_ok(work)
        summary = pd.read_parquet(work / "results/summary/cells.parquet")
        assert (summary["status"] == "ok").all(), summary[["link", "status"]]
        assert (summary["wakeup_latency_a"] == "held at 0 us").all(), summary
        assert (summary["arrival_clock"] == "segment").all()  # the helper's socket
        turns = summary["rpc_turns_per_token"]
        assert ((turns - 1).abs() <= 0.2).all(), turns.tolist()
        assert (work / "results/report.html").stat().st_size > 0
        # Nothing of the run is left on A: no process of the user's (a server its run
        # ended may wait, a zombie, for this machine's init to collect it), no guard.
        table = subprocess.run(["ps", "-u", str(user.uid), "-o", "stat=,args="],
                               capture_output=True, text=True).stdout.splitlines()
        assert [line for line in table if not line.lstrip().startswith("Z")] == [], table
        tables = subprocess.run(["nft", "list", "tables"], capture_output=True,
                                text=True).stdout
        assert "splitbench" not in tables, tables
    finally:
        user.run(["python", "-m", "splitbench", "teardown"], work)
        shutil.rmtree(user.base, ignore_errors=True)


def test_a_b_without_the_tools_gets_one_line_per_missing_requirement(
        separate_host_b, tmp_path):  # noqa: F811 (the fixture)
    """A B with sshd and nothing else splitbench needs: the doctor names each missing
    requirement once, each with its fix, and says nothing wrong about what it could not
    look at."""
    b = separate_host_b(variant="bare")
    second_cable(b)
    (tmp_path / "rig.yaml").write_text(yaml.safe_dump(rig(b), sort_keys=False))
    done = subprocess.run([sys.executable, "-m", "splitbench", "doctor", "--configfile",
                           str(tmp_path / "rig.yaml"), "--results", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=300)
    bad = [line for line in done.stdout.splitlines() if line.startswith("✗")]
    assert done.returncode == 1
    install = "install it there (Debian: apt-get install {})"
    assert bad == [
        f"✗ rig: host B has no ip — {install.format('iproute2')}",
        f"✗ rig: host B has no ping — {install.format('iputils-ping')}",
        f"✗ rig: host B has no iperf3 — {install.format('iperf3')}",
        f"✗ rig: host B has no ss — {install.format('iproute2')}",
        "✗ rig: host B has no Python 3.8 or later at python3 — install python3 there, or "
        "set hosts.b.python to one",
        f"✗ rig: host B has no nft — {install.format('nftables')}",
        f"✗ rig: not root on host B, and sudo -n runs neither {privilege.HELPER} nor ip, "
        "nft or tee /dev/cpu_dma_latency for bench, which addresses for links cable1, "
        "cable2, the firewall guard and holding the CPUs' wake-up latency need — install "
        "sudo there (Debian: apt-get install sudo), then as root there: install -o root -g "
        "root -m 0755 /home/bench/.cache/splitbench/splitbench-root "
        f"{privilege.HELPER}, then visudo -f /etc/sudoers.d/splitbench: bench ALL=(root) "
        f"NOPASSWD: {privilege.HELPER} — or set adopt: true on links cable1, cable2, "
        "firewall: own on the pair and hold_wakeup_latency: false (top level) "
        "(docs/two-machines.md)",
    ], "\n".join(bad)
    # The worker needs nothing of B but its C library: A's, carried, runs there.
    assert "✓ rig: host B has no build of its own: host A's worker runs there" in done.stdout


def test_two_runs_against_one_b_at_once_take_turns_and_both_end_clean(
        separate_host_b, tmp_path):  # noqa: F811 (the fixture)
    """Two work directories, one config, one B, started together: each run serves on a
    block of ports of its own and guards them with a table of its own; their jobs take
    turns on the pair (so neither reads the other as interference); the link's address,
    which both use, stays until the last of them ends; and B ends as it was."""
    b = separate_host_b(sudoers="bench ALL=(root) NOPASSWD: /usr/bin/ip, /usr/sbin/nft, "
                                "/usr/bin/tee /dev/cpu_dma_latency")
    host = host_from_spec("b", config_block(b))
    second_cable(b)  # bare: both runs address it
    config = rig(b)
    del config["pairs"]["rig"]["links"]["cable1"]
    config["baseline_link"] = "cable2"
    env = {k: v for k, v in os.environ.items() if k != "SPLITBENCH_STATE"}
    runs = {}
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        work = workflow_copy(tmp_path / name)
        (work / "rig.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        runs[name] = (work, subprocess.Popen(
            ["taskset", "-c", "0", SNAKEMAKE, "--cores", "1", "all", "--configfile",
             "rig.yaml", "--replace-workflow-config"], cwd=work, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = {name: proc.communicate(timeout=900)[0] for name, (_, proc) in runs.items()}
    for name, (work, proc) in runs.items():
        assert proc.returncode == 0, (name, logs[name][-4000:])
        summary = pd.read_parquet(work / "results/summary/cells.parquet")
        assert (summary["status"] == "ok").all(), (name, summary["status"])
        # B held the wake-up latency through its one sudo'd tee.
        assert (summary["wakeup_latency_b"] == "held at 0 us").all(), summary
        # Neither measured while the other worked: every check ok, links included.
        assert_every_check_ok(work)
    # Each served on ports of its own (each run's launch records say which).
    blocks = {name: json.loads((work / ".splitbench/ports.json").read_text())["rig"]
              for name, (work, _) in runs.items()}
    assert blocks["one"] != blocks["two"], blocks
    # They took turns: some job of one waited for the other, and said so in its log.
    said = "".join(log.read_text() for work, _ in runs.values()
                   for log in (work / "results/logs").rglob("*.log"))
    assert "waiting for its turn" in said
    # B as it was: no process, table or address of either run.
    table = host.run(["ps", "-eo", "args="]).stdout.splitlines()
    assert all(args.startswith(("sshd", "/usr/sbin/sshd", "ps ", "/bin/sh -c ps "))
               for args in table), table
    tables = host.run(["sudo", "-n", "/usr/sbin/nft", "list", "tables"]).stdout
    assert "splitbench" not in tables, tables
    # The second cable's addresses, made by whichever run came first and used by both,
    # were removed by the last to end, on both hosts.
    addresses = host.run(["ip", "-br", "addr", "show", "dev", SECOND["interface_b"]]).stdout
    assert SECOND["addr_b"] not in addresses, addresses
    on_a = subprocess.run(["ip", "-br", "addr", "show", "dev", SECOND["interface_a"]],
                          capture_output=True, text=True).stdout
    assert SECOND["addr_a"] not in on_a, on_a
