"""Host B as another machine (tests/support/separate_host.py): its own root filesystem, processes,
hostname, /tmp, CPUs and network, a fresh copy at every start, reached over SSH as an
unprivileged user with only the sudo rights a test grants."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from splitbench.backends.llamacpp import toolchain
from splitbench.infra.hosts import Host, HostError, host_from_spec
from tests.conftest import ends_within, needs_root, running
from tests.support import separate_host
from tests.support.separate_host import SECOND_NETWORK, config_block, host_b, rootfs

pytestmark = [
    pytest.mark.slow,  # builds a root filesystem once, starts sshd in namespaces
    pytest.mark.timeout(300),  # the first start builds both variants (about 20 s each)
    needs_root(),
]

separate_host_b = separate_host.separate_host_b  # the fixture, for this module's tests

SUDOERS = "bench ALL=(root) NOPASSWD: /usr/sbin/ip, /usr/sbin/nft"
SPLITBENCH_NEEDS = ("python3", "iperf3", "sockperf", "nft", "sudo", "ip", "ping")


def on_b(settings: dict, *argv: str) -> subprocess.CompletedProcess[str]:
    return host_from_spec("b", config_block(settings)).run(list(argv), check=False)


def out(settings: dict, *argv: str) -> str:
    result = on_b(settings, *argv)
    assert result.returncode == 0, (argv, result.stderr)
    return result.stdout.strip()


def has(settings: dict, tool: str) -> bool:
    """On B, as a path search that includes sbin (bench's own PATH leaves it out)."""
    return on_b(settings, "sh", "-c",
                f"PATH=$PATH:/usr/sbin:/sbin command -v {tool}").returncode == 0


def test_b_is_another_machine(separate_host_b):
    b = separate_host_b()
    assert out(b, "id", "-un") == "bench" and out(b, "id", "-u") == "1000"
    assert out(b, "hostname") == "hostb" != socket.gethostname()

    # Only B's processes: sshd is its PID 1, then the sessions and this command.
    processes = [line.split(None, 1) for line in
                 out(b, "ps", "-e", "-o", "pid=,comm=").splitlines()]
    assert ["1", "sshd"] in processes, processes
    assert {comm for _, comm in processes} <= {"sshd", "sh", "bash", "ps"}, processes
    assert len(processes) <= 8, processes

    # B's own /tmp and /dev/shm, empty at start; neither side sees the other's files.
    assert out(b, "find", "/tmp", "/dev/shm", "-mindepth", "1") == ""
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="sb-on-a-") as on_a:
        assert on_b(b, "test", "-e", on_a.name).returncode == 1
    made_on_b = out(b, "mktemp", "/tmp/sb-on-b-XXXXXX")
    assert not Path(made_on_b).exists()
    # ...and B's files are readable from A while it runs.
    assert (Path(b["root"]) / made_on_b.lstrip("/")).exists()
    assert (Path(b["root"]) / "etc/hostname").read_text() == "hostb\n"

    # Not this machine's build: A's venv and llama.cpp programs are absent on B.
    for path in (Path(sys.prefix), toolchain.pip_bin_dir()):
        assert path.exists()
        assert on_b(b, "test", "-e", str(path)).returncode == 1, path

    # B's own CPU, for its first process and for what a session runs.
    status = out(b, "cat", "/proc/1/status", "/proc/self/status")
    assert [line.split()[1] for line in status.splitlines()
            if line.startswith("Cpus_allowed_list:")] == [b["cpus"]] * 2
    assert b["cpus"] == "1"

    # B's network: its end of the veth and its loopback, nothing of A's.
    assert out(b, "ls", "/sys/class/net").split() == ["lo", "sbhb-b"]
    # The full variant has what splitbench runs on B.
    for tool in SPLITBENCH_NEEDS:
        assert has(b, tool), tool


def test_sudo_grants_exactly_the_sudoers_line_and_root_cannot_log_in(separate_host_b):
    b = separate_host_b(sudoers=SUDOERS)
    addresses = out(b, "sudo", "-n", "/usr/sbin/ip", "-br", "addr")
    assert "sbhb-b" in addresses and "10.214.20.2/30" in addresses, addresses
    refused = on_b(b, "sudo", "-n", "/usr/bin/id")
    assert refused.returncode != 0 and "a password is required" in refused.stderr, refused

    # Root's login is refused by sshd even with an authorized key (written from A).
    root_ssh = Path(b["root"]) / "root/.ssh"
    root_ssh.mkdir(mode=0o700)
    (root_ssh / "authorized_keys").write_text(Path(b["identity"] + ".pub").read_text())
    root = Host("b", ssh=f"root@{b['addr_b']}", ssh_port=22, identity=b["identity"],
                known_hosts=b["known_hosts"])
    with pytest.raises(HostError, match="Authentication failed"):
        root.run(["true"])

    # A second B beside the first, with no sudoers line: no rights at all.
    second = separate_host_b(net=SECOND_NETWORK)
    assert out(second, "ls", "/sys/class/net").split() == ["lo", "sbhb2-b"]
    refused = on_b(second, "sudo", "-n", "/usr/sbin/ip", "-br", "addr")
    assert refused.returncode != 0 and "a password is required" in refused.stderr, refused


def tree_listing(root: Path) -> dict[str, tuple[int, int, int, int, int]]:
    """Every entry's mode, owner, group, size and modification time."""
    listing = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            stat = os.lstat(os.path.join(folder, name))
            listing[os.path.relpath(os.path.join(folder, name), root)] = (
                stat.st_mode, stat.st_uid, stat.st_gid, stat.st_size, stat.st_mtime_ns)
    return listing


def test_each_start_is_fresh_and_the_cached_tree_untouched(state_dir, tmp_path):
    cached = rootfs("full")
    before = tree_listing(cached)
    with host_b(tmp_path / "first") as b:
        print(f"host B started in {b['start_s']} s")
        out(b, "sh", "-c", "mkdir -p ~/.cache/build && echo left > ~/.cache/build/x "
                           "&& echo left > ~/x && rm -f /tmp/* && touch /tmp/y")
        assert (Path(b["upper"]) / "home/bench/x").read_text() == "left\n"
    with host_b(tmp_path / "second") as b:
        print(f"host B started in {b['start_s']} s")
        assert on_b(b, "ls", "/home/bench").stdout.split() == []
        assert on_b(b, "test", "-e", "/home/bench/.cache").returncode == 1
    assert tree_listing(cached) == before
    assert not (cached / "home/bench").exists()


def test_bare_b_logs_in_without_splitbench_tools(separate_host_b):
    b = separate_host_b(variant="bare")
    assert out(b, "id", "-un") == "bench"
    assert has(b, "sh") and has(b, "sshd")
    missing = [tool for tool in SPLITBENCH_NEEDS if not has(b, tool)]
    assert missing == list(SPLITBENCH_NEEDS)


def pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:  # ended, or a process this sandbox hides (its init)
        return None


def processes_in(namespace: str) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and pid_namespace(int(p.name)) == namespace]


def mounted_anywhere(path: str) -> list[str]:
    """The processes (of any mount namespace) whose mounts include `path`."""
    holders = []
    for mountinfo in Path("/proc").glob("[0-9]*/mountinfo"):
        try:
            if f" {path} " in mountinfo.read_text():
                holders.append(mountinfo.parent.name)
        except OSError:  # ended, or a zombie (EINVAL)
            continue
    return holders


def listed_namespaces() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]


def test_nothing_of_b_is_left_once_it_ends(state_dir, tmp_path):
    with host_b(tmp_path) as b:
        print(f"host B started in {b['start_s']} s")
        out(b, "sh", "-c", "sleep 300 >/dev/null 2>&1 &")  # a process B keeps
        b_processes = processes_in(pid_namespace(b["init_pid"]))
        assert len(b_processes) >= 3, b_processes  # sshd, its session's, the sleep
        unshare_pid = int(Path(f"/proc/{b['init_pid']}/stat").read_text().split()[3])
        merged = b["merged"]
        assert mounted_anywhere(merged), "the check cannot see B's overlay"
        assert b["netns"] in listed_namespaces()
    # Within the wait the test allows: a pid namespace ends once its init is reaped.
    assert [pid for pid in [unshare_pid, *b_processes] if not ends_within(pid, 5)] == []
    assert not any(running(pid) for pid in b_processes)
    assert b["netns"] not in listed_namespaces()
    assert subprocess.run(["ip", "link", "show", b["interface_a"]],
                          capture_output=True).returncode != 0
    deadline = time.monotonic() + 5
    while mounted_anywhere(merged) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert mounted_anywhere(merged) == []


SWEPT = {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_head_kv": 1, "n_ff": 128,
         "n_vocab": 1024, "context_length": 4096, "seed": 3}


def test_the_delay_sweep_counts_round_trips_on_a_real_pair_without_netem_or_root(
        separate_host_b, state_dir, tmp_path):
    """A pair in mode: ssh, B another machine reached as bench: the sweep puts each delay
    on the pair's own link through a relay on host A (no netem, no root on B), and reads
    one round trip per token with one worker, as the packets count; B ends with nothing
    of it."""
    from splitbench.backends.llamacpp import gguf_model
    from splitbench.cells import roundtrips
    from splitbench.configuration import parsed
    from splitbench.infra import procs
    from splitbench.matrix import plan

    b = separate_host_b(sudoers="bench ALL=(root) NOPASSWD: /usr/bin/ip, /usr/sbin/nft, "
                                "/usr/bin/tee /dev/cpu_dma_latency")
    cable = {key: b[key] for key in ("interface_a", "interface_b", "addr_a", "addr_b",
                                     "prefix")}
    config = parsed({
        "pairs": {"rig": {"mode": "ssh", "hosts": {"a": {}, "b": config_block(b)},
                          "links": {"cable": cable}}},
        "models": {"m": {"synthetic": SWEPT, "layers_on_b": 2, "threads": 1}},
        "contexts": {"short": 64}, "concurrency": [1],
        # Eight rounds: with three, the fit's own uncertainty was ±0.10 on a busy machine and
        # a 2-sigma read (1.20, a fresh clone's CI) fell outside the 20% the product claims.
        "roundtrips": {"workers": [1], "delays_ms": [0.0, 1.0, 2.0], "requests": 8,
                       "n_predict": 32, "rr_samples": 100},
        "baseline_link": "cable", "toolchain": {"source": "pip"},
        "measurement_version": 1})
    gguf = tmp_path / "m.gguf"
    gguf_model.write_synthetic(SWEPT, gguf)
    model = gguf_model.describe({"synthetic": SWEPT}, gguf)
    tools = toolchain.record("rig", "pip", {"a": {}, "b": config_block(b)},
                             tmp_path / "toolchain.json")
    spec = plan.roundtrips_slice(config, "rig", "m", 1)
    assert spec["link"]["mode"] == "ssh"  # the sweep's points are this pair's link
    out_path = tmp_path / "w1.parquet"
    result = roundtrips.sweep(spec, model, tools, str(out_path))
    rows = pd.read_parquet(out_path)
    assert rows["error"].isna().all(), rows[["delay_ms", "error"]]
    assert (rows["emulation_delay"] == "relay").all()
    slope, se = result["round_trips_per_token"], result["round_trips_se"]
    assert se < 0.3 and abs(slope - 1) <= 0.2, result
    assert abs(result["turns_per_token"] - 1) <= 0.1, result  # the packets' count
    # The same packets split the slope on a real pair too: the turn's waits (one turn:
    # the latency, within 20%) and host A's own time, which add up to it.
    waits, own = result["waits_per_latency"], result["a_time_per_latency"]
    assert abs(waits - 1) <= 0.2 and abs(waits + own - slope) <= 0.05, result
    latency = rows.groupby("delay_ms")["rr_ms"].first()
    for delay in (1.0, 2.0):  # the relay's delay, measured on the pair: never early
        assert latency[delay] >= 2 * delay, latency
        assert latency[delay] - latency[0.0] <= 1.25 * 2 * delay, latency
    # The sweep stopped what it started on B (its points' workers) and on A (their
    # relays) itself: the rest of the run's jobs find the pair as it was.
    left = out(b, "ps", "-eo", "args=").splitlines()
    assert not [p for p in procs.all_procs() if p.get("role") in ("relay", "rpc-server")]
    assert all(args.startswith(("sshd", "/usr/sbin/sshd", "ps ", "/bin/sh -c ps "))
               for args in left), left


@contextlib.contextmanager
def a_run(tmp_path: Path) -> Iterator[None]:
    """A run's own state directory, apart from the test's (which holds host B itself:
    a run's teardown must not end B); torn down on the way out whatever happened."""
    from splitbench.infra import teardown

    test_state = os.environ["SPLITBENCH_STATE"]
    os.environ["SPLITBENCH_STATE"] = str(tmp_path / "run-state")
    try:
        yield
    finally:
        teardown.teardown()
        os.environ["SPLITBENCH_STATE"] = test_state


def ipv4_of(b: dict) -> list[tuple[str, int]]:
    """B's link interface's IPv4 addresses, as (address, prefix)."""
    shown = json.loads(out(b, "ip", "-j", "-4", "addr", "show", "dev", b["interface_b"]))
    return sorted((a["local"], a["prefixlen"]) for e in shown for a in e["addr_info"])


def doctor_text(b: dict, tmp_path: Path, adopt: bool) -> str:
    """The doctor's lines for a pair whose one link is B's LAN interface."""
    from splitbench.configuration import parsed
    from splitbench.workflow import doctor

    link = {"interface_a": b["interface_a"], "interface_b": b["interface_b"]}
    link.update({"adopt": True} if adopt else
                {"addr_a": b["addr_a"], "addr_b": b["addr_b"], "prefix": 30})
    config = parsed({
        "pairs": {"rig": {"mode": "ssh", "hosts": {"a": {}, "b": config_block(b)},
                          "links": {"lan": link}}},
        "models": {"m": {"synthetic": SWEPT, "layers_on_b": 2, "threads": 1}},
        "contexts": {"short": 64}, "concurrency": [1], "baseline_link": "lan",
        "toolchain": {"source": "pip"}, "measurement_version": 1})
    return "\n".join(map(str, doctor.check(config, tmp_path / "results")))


def _reaches(source: str, addr: str, port: int) -> str:
    """From host A, source address `source`: 'open' (a listener answered), 'refused'
    (B's stack answered with a reset: nothing listens, but the packet got there) or
    'dropped' (no answer in 2 s)."""
    with socket.socket() as sock:
        sock.bind((source, 0))
        sock.settimeout(2)
        try:
            sock.connect((addr, port))
        except ConnectionRefusedError:
            return "refused"
        except TimeoutError:
            return "dropped"
        return "open"


def test_the_lan_is_a_link_as_it_is_with_only_the_other_host_let_through(
        separate_host_b, state_dir, tmp_path):
    """The one network a pair may have is the LAN: the interface holding the default
    route. It is a link only with adopt: true (nothing on it changed) and the run's
    guard; on it, the run's ports answer host A's address alone, while everything else
    on that interface (B's sshd here) stays open to every address."""
    from splitbench.links import real

    b = separate_host_b(sudoers=SUDOERS)
    # B's only network leads to host A and beyond it: its default route, as a LAN's.
    subprocess.run(["ip", "-n", b["netns"], "route", "add", "default", "via", b["addr_a"],
                    "dev", b["interface_b"]], check=True)
    spec = {"pair": "rig", "link": "lan", "mode": "ssh",
            "hosts": {"a": {}, "b": config_block(b)},
            "interface_a": b["interface_a"], "interface_b": b["interface_b"]}
    with pytest.raises(real.SetupError, match=rf"host b's interface {b['interface_b']} "
                       r"holds the default route \(IPv4\).*set adopt: true"):
        real.ensure({**spec, "addr_a": b["addr_a"], "addr_b": b["addr_b"], "prefix": 30})
    with pytest.raises(real.SetupError, match=r"needs the pair's firewall: guard"):
        real.ensure({**spec, "adopt": True, "firewall": "own"})
    before = ipv4_of(b)
    # The doctor says the same, before anything starts.
    said = doctor_text(b, tmp_path, adopt=False)
    assert f"✗ rig: link lan, host B: link lan: host b's interface {b['interface_b']} holds " \
           "the default route" in said, said
    said = doctor_text(b, tmp_path, adopt=True)
    assert "the LAN (it holds the default route): compared as it is, only the other host " \
           "let through to the run's ports on it" in said, said

    # Another machine on the LAN: a second address on A's side, routed by B's default.
    stranger = "10.214.30.5"
    subprocess.run(["ip", "addr", "add", f"{stranger}/32", "dev", b["interface_a"]],
                   check=True)
    with a_run(tmp_path):
        link = real.ensure({**spec, "adopt": True})
        assert (link.addr_a, link.addr_b) == (b["addr_a"], b["addr_b"])  # as they were
        assert link.emulation["lan"] == ["b"]  # what the links table and finding say
        assert ipv4_of(b) == before
        worker = link.ports.worker(0)
        assert _reaches(b["addr_a"], b["addr_b"], worker) == "refused"  # the other host
        assert _reaches(stranger, b["addr_b"], worker) == "dropped"  # not the run's ports
        assert _reaches(stranger, b["addr_b"], b["ssh_port"]) == "open"  # the rest: open
    assert "splitbench" not in out(b, "sudo", "-n", "/usr/sbin/nft", "list", "tables")
    assert _reaches(stranger, b["addr_b"], worker) == "refused"  # the guard went with it
    assert ipv4_of(b) == before


def test_a_process_that_failed_on_b_is_named_with_its_log_from_b(separate_host_b, state_dir):
    """A worker that ends on B during start-up: the error carries the last lines of its
    log from B while its record stands, and from the copy kept on A once forgotten."""
    from splitbench.backends import lifecycle
    from splitbench.infra import procs

    b = separate_host_b()
    host = host_from_spec("b", config_block(b))
    record = host.spawn(["sh", "-c", "for i in 1 2 3; do echo line $i; done; "
                               "echo 'cannot open shared object file' >&2; exit 127"],
                        role="rpc-server", key="failing-worker", log_path=state_dir / "unused")
    deadline = time.monotonic() + 10
    while procs.is_alive(record) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not procs.is_alive(record)
    tail = lifecycle.log_tail(record)
    assert tail.splitlines()[-4:] == ["line 1", "line 2", "line 3",
                                      "cannot open shared object file"], tail
    procs.forget_process(record)  # B's copy removed, A keeps what it said
    assert out(b, "sh", "-c", "ls /tmp | grep -c splitbench- || true") == "0"
    assert lifecycle.log_tail(record).splitlines()[-1] == "cannot open shared object file"


def test_the_worker_is_copied_to_b_once_per_run(separate_host_b, state_dir, tmp_path):
    """The doctor's trial takes its copy off B; the run's toolchain job leaves its own
    for the launches, which find it by its hashes instead of copying again; teardown
    removes it."""
    from splitbench.backends.llamacpp import worker_copy

    b = separate_host_b()
    hosts = {"a": {}, "b": config_block(b)}

    def copies() -> list[str]:
        return out(b, "sh", "-c", "ls -d $HOME/.splitbench-worker.* 2>/dev/null || true"
                   ).split()

    with a_run(tmp_path):
        toolchain.describe_pair("pip", hosts, "pair 'rig'")  # the doctor's way
        assert copies() == []
        tools = toolchain.record("rig", "pip", hosts, tmp_path / "toolchain.json")
        assert tools["status"] == "ok", tools
        (kept,) = copies()
        launch_dir = worker_copy.carry(host_from_spec("b", config_block(b)),
                                       Path(tools["a"]["bin_dir"]), "pair 'rig'")
        assert launch_dir == kept and copies() == [kept]
    assert copies() == []  # the run's teardown took it off
