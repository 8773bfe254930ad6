"""What splitbench serves is reachable through the link only, and the doctor checks a
pair before anything starts: over SSH for real, an sshd in a namespace of our own as
host B.

Host A is this machine's own network stack; host B is a namespace joined to it by a
veth pair, reached only through a real OpenSSH server with a known host key.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from splitbench.backends import lifecycle
from splitbench.configuration import parsed
from splitbench.infra import procs, teardown
from splitbench.infra.hosts import Host, host_from_spec
from splitbench.links import real
from splitbench.links.link import PORT_BLOCK
from tests.support.ssh_b import ADDR_A, ADDR_B, IF_A, IF_B, NEEDS, NS, PORT, link_spec, sh

pytestmark = NEEDS


# --- the firewall guard: nothing splitbench serves is reachable beyond the link -------
LAN = {"a": ("sb-sshtest-lana", "sblan-a0", "10.214.11"),  # namespace, veth, subnet
       "b": ("sb-sshtest-lanb", "sblan-b0", "10.214.12")}


def lan_beside(side: str) -> str:
    """A third namespace on the other side of host `side` ("the LAN"): a veth to that
    host, and a route to the link's subnet through it, as a neighbour on the host's
    network would have. Returns the namespace."""
    ns, veth, subnet = LAN[side]
    subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
    sh("ip", "netns", "add", ns)
    procs.record_namespace(ns)
    host_side = [] if side == "a" else ["ip", "-n", NS]  # host A: this machine itself
    sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "lan0", "netns", ns)
    if side == "b":
        sh("ip", "link", "set", veth, "netns", NS)
    for argv in (["addr", "add", f"{subnet}.1/24", "dev", veth], ["link", "set", veth, "up"]):
        sh(*(host_side or ["ip"]), *argv)
    for argv in (["addr", "add", f"{subnet}.2/24", "dev", "lan0"], ["link", "set", "lan0", "up"],
                 ["link", "set", "lo", "up"],
                 ["route", "add", "10.214.9.0/30", "via", f"{subnet}.1"]):
        sh("ip", "-n", ns, *argv)
    return ns


def reaches(ns: str | None, addr: str, port: int, uid: int | None = None) -> str:
    """What a TCP connection from namespace `ns` (None: this machine; `uid`: as that
    user) to addr:port meets: "accepted", "refused" (nothing listens) or "dropped" (no
    answer in 0.75 s: over a veth the kernel answers a connection in microseconds,
    whatever the CPUs are doing)."""
    code = ("import socket,sys\ns=socket.socket();s.settimeout(0.75)\n"
            "try:\n s.connect((sys.argv[1],int(sys.argv[2])));print('accepted')\n"
            "except ConnectionRefusedError:\n print('refused')\n"
            "except OSError:\n print('dropped')\n")
    argv = [sys.executable, "-c", code, addr, str(port)]
    if uid is not None:
        argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]
    if ns:
        argv = ["ip", "netns", "exec", ns, *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()


def listen(host: Host, addr: str, port: int, key: str, tmp_path: Path) -> dict:
    code = ("import socket,sys,time\ns=socket.socket();"
            "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
            "s.bind((sys.argv[1],int(sys.argv[2])));s.listen(8);time.sleep(600)\n")
    record = host.spawn([host.python, "-c", code, addr, str(port)], role="other", key=key,
                        log_path=tmp_path / f"{key}.log")
    host.wait_listening(addr if addr != "0.0.0.0" else "0.0.0.0", port, timeout=15)
    return record


def test_what_splitbench_serves_is_reachable_through_the_link_only(host_b, tmp_path):
    """During a run, a neighbour on either host's LAN reaches neither the worker's port
    nor the rendezvous port (on every address) nor any other port of the link's
    address; host A reaches them all over the link; after teardown nothing of the guard
    is left, and the neighbour meets a refusal because nothing listens."""
    from splitbench.links import guard

    lan_a, lan_b = lan_beside("a"), lan_beside("b")
    # Without the guard the neighbours reach both hosts: B's sshd on its link address
    # answers from B's LAN side, and A answers (nothing listens yet) on its LAN address.
    link = real.ensure(link_spec(host_b))  # the link, proved, and its guard on both hosts
    ports = link.ports  # the run's block: its worker, rendezvous and other ports
    store, elsewhere = ports.backend_own(0), ports.last + 1  # the latter another run's
    assert reaches(lan_b, ADDR_B, PORT) == "dropped"  # every port of the link address
    b = host_from_spec("b", host_b)
    a = Host("a")
    listeners = [listen(b, ADDR_B, ports.worker(0), "sb-w", tmp_path),  # the RPC worker
                 listen(b, "0.0.0.0", ports.backend_own(1), "sb-store-b", tmp_path),
                 listen(b, ADDR_B, 41000, "sb-gloo", tmp_path),  # a rank's own port
                 listen(a, "0.0.0.0", store, "sb-store-a", tmp_path),
                 listen(a, "0.0.0.0", elsewhere, "sb-other-a", tmp_path)]
    for port in (ports.worker(0), ports.backend_own(1), 41000):
        assert reaches(None, ADDR_B, port) == "accepted", port  # over the link
        assert reaches(lan_b, ADDR_B, port) == "dropped", port
    assert reaches(lan_b, f"{LAN['b'][2]}.1", ports.backend_own(1)) == "dropped"  # B's LAN
    # On B itself, the run's user reaches the worker through loopback; another user
    # (nobody) does not: the worker has no authentication.
    assert reaches(NS, ADDR_B, ports.worker(0)) == "accepted"
    assert reaches(NS, ADDR_B, ports.worker(0), uid=65534) == "dropped"
    # Nor a rank's own port on the link address (outside the block): vLLM's ranks
    # listen there, and any local user reached them through loopback.
    assert reaches(NS, ADDR_B, 41000, uid=65534) == "dropped"
    assert reaches(lan_a, f"{LAN['a'][2]}.1", store) == "dropped"
    assert reaches(lan_a, ADDR_A, store) == "dropped"
    assert reaches(None, ADDR_A, store) == "accepted"
    # A port outside the run's block (another run's, or another program's) on A's LAN
    # address is left alone: the guard filters the run's own ports only.
    assert reaches(lan_a, f"{LAN['a'][2]}.1", elsewhere) == "accepted"
    # A wildcard listener the guard covers is fine; one it does not is named.
    link = {ADDR_A, ADDR_B}
    assert guard.uncovered_listeners(b, [r["pid"] for r in listeners[:3]], ports,
                                     kept_to=link) == []
    wide = listen(b, "0.0.0.0", 41001, "sb-wide", tmp_path)
    assert guard.uncovered_listeners(b, [wide["pid"]], ports, kept_to=link) == [
        "0.0.0.0:41001 (python3)"]
    for record in listeners[3:]:
        procs.stop(record["key"])

    teardown.teardown()
    for ns in (NS, None):
        tables = subprocess.run([*(["ip", "netns", "exec", ns] if ns else []), "nft", "list",
                                 "tables"], capture_output=True, text=True).stdout
        assert "splitbench" not in tables, (ns, tables)
    # The namespaces went with the teardown; the LAN side of B with them. Host A is this
    # machine: its rendezvous port now refuses its LAN neighbour (nothing listens).
    lan_a = lan_beside("a")
    try:
        assert reaches(lan_a, f"{LAN['a'][2]}.1", store) == "refused"
    finally:
        subprocess.run(["ip", "netns", "delete", lan_a], capture_output=True)


# --- splitbench doctor: a pair checked before anything starts ------------------------
def rig_config(host_b: dict, **link) -> dict:
    return {
        "measurement_version": 1, "toolchain": {"source": "pip"},
        "pairs": {"rig": {"mode": "ssh", "hosts": {"a": {}, "b": dict(host_b)}, "links": {
            "veth": {"interface_a": IF_A, "interface_b": IF_B, "addr_a": ADDR_A,
                     "addr_b": ADDR_B, "prefix": 30, **link}}}},
        "baseline_link": "veth",
        "models": {"tiny": {"synthetic": {
            "n_layer": 2, "n_embd": 64, "n_head": 4, "n_head_kv": 2, "n_ff": 128,
            "n_vocab": 1024, "context_length": 4096, "seed": 1}, "layers_on_b": 1}},
        "contexts": {"short": 32}, "concurrency": [1],
    }


def problems(config: dict, tmp_path: Path) -> list[str]:
    from splitbench.workflow import doctor

    return [str(line) for line in doctor.check(parsed(config), tmp_path / "results")
            if line.mark == doctor.BAD]


def doctor_lines(config: dict, tmp_path: Path) -> str:
    from splitbench.workflow import doctor

    return "\n".join(map(str, doctor.check(parsed(config), tmp_path / "results")))


def test_doctor_passes_a_ready_pair_and_names_each_broken_requirement(host_b, tmp_path):
    from splitbench.backends.llamacpp.toolchain import pip_bin_dir

    real.ensure(link_spec(host_b))  # A's end up: B is reached over the link
    ready = rig_config(host_b)
    (tmp_path / "rig.yaml").write_text(yaml.safe_dump(ready))
    done = subprocess.run([sys.executable, "-m", "splitbench", "doctor", "--configfile",
                           str(tmp_path / "rig.yaml"), "--results", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for said in ("✓ rig: host B reached over SSH", "✓ rig: root on host B",
                 "✓ rig: host B has no build of its own: host A's worker runs there",
                 f"✓ rig: link veth, host B: {IF_B} up", "✓ rig: host B's python3 is Python",
                 "ready"):
        assert said in done.stdout, (said, done.stdout)

    # A missing tool on B (here the Python its helpers need).
    broken = rig_config({**host_b, "python": "/nonexistent/python3"})
    assert problems(broken, tmp_path) == [
        "✗ rig: host B has no Python 3.8 or later at /nonexistent/python3 — install "
        "python3 there, or set hosts.b.python to one"]
    # A different llama.cpp build on B: its worker differs by one byte.
    other = tmp_path / "other-build"
    other.mkdir()
    for name in ("llama-server", "ggml-rpc-server"):
        shutil.copy(pip_bin_dir() / name, other / name)
    with (other / "ggml-rpc-server").open("ab") as worker:
        worker.write(b"\0")
    broken = {**rig_config(host_b), "toolchain": {"source": "path"}}
    broken["pairs"]["rig"]["hosts"]["a"]["bin_dir"] = str(pip_bin_dir())
    broken["pairs"]["rig"]["hosts"]["b"]["bin_dir"] = str(other)
    (found,) = problems(broken, tmp_path)
    assert found.startswith("✗ rig: hosts run different llama.cpp builds"), found
    # An unknown host key: B is not reached, and nothing else is asked of it.
    (tmp_path / "empty_known_hosts").write_text("")
    broken = rig_config({**host_b, "known_hosts": str(tmp_path / "empty_known_hosts")})
    (found,) = problems(broken, tmp_path)
    assert "host B (root@10.214.9.2) cannot be reached" in found and "known" in found, found
    # An interface B does not have.
    (found,) = problems(rig_config(host_b, interface_b="sbssh-none"), tmp_path)
    assert found == ("✗ rig: link veth, host B: no interface sbssh-none — name the "
                     "interface of the cable (interface_b)")
    # The block of ports this run would take, taken on B: the doctor names the next.
    said = doctor_lines(ready, tmp_path)
    first = int(re.search(r"✓ rig: ports (\d+)-\d+ are free on both hosts", said)[1])
    listen(host_from_spec("b", host_b), ADDR_B, first + 4, "sb-taken", tmp_path)
    said = doctor_lines(ready, tmp_path)
    second = int(re.search(r"✓ rig: ports (\d+)-\d+ are free on both hosts", said)[1])
    assert second != first and not first <= second < first + PORT_BLOCK, (first, second)


def test_a_vllm_model_missing_on_host_b_is_refused_before_any_rank_starts(host_b, tmp_path):
    """vLLM's ranks load the model from the same path on each host: one B lacks (a
    synthetic model is written on A only) is named, with the copy that fixes it."""
    from splitbench.backends.lifecycle import LaunchError
    from splitbench.backends.vllm import servers

    link = real.ensure(link_spec(host_b))
    there = tmp_path / "model.hf"  # the lab's B shares this file system
    there.mkdir()
    (there / "config.json").write_text("{}")
    servers._require_model_on_b(link, str(there))
    with pytest.raises(LaunchError, match=r"host B \(root@10\.214\.9\.2\) has no model at "
                                          r"\S+/absent .*rsync -a"):
        servers._require_model_on_b(link, str(tmp_path / "absent"))
    assert not [p for p in procs.all_procs() if p["role"].startswith("vllm")]


def test_vllm_caches_on_host_b_are_private_to_its_user(host_b):
    """vLLM's and torch's compile caches on B, whose artifacts the ranks load and run,
    are in B's user's own home, mode 0700, never at a fixed path in /tmp that another
    user could have made first and filled (here: one planted where they once were)."""
    from splitbench.backends.vllm import servers

    real.ensure(link_spec(host_b))  # A's end up: B is reached over the link
    host = host_from_spec("b", host_b)
    planted = "/tmp/splitbench-vllm-cache"
    fresh = host.run(["sh", "-c", f"test -e {planted} || {{ mkdir -m 777 {planted} && "
                                  "echo made; }"]).stdout.strip() == "made"
    try:
        root = servers._cache_root(host)
        home = host.run(["sh", "-c", 'printf %s "$HOME"']).stdout
        assert root == f"{home}/.cache/splitbench/vllm", root
        mode, owner = host.run(["stat", "-c", "%a %u", root]).stdout.split()
        assert (mode, owner) == ("700", host.run(["id", "-u"]).stdout.strip())
    finally:
        if fresh:
            host.run(["rmdir", planted])


def test_two_runs_guards_are_each_their_own(host_b, tmp_path, monkeypatch):
    """Two runs (two state directories) against the same B: each has its table, and the
    one that ends first deletes its own only: the other's traffic stays guarded."""
    from splitbench.links import guard

    def tables() -> set[str]:
        listed = subprocess.run(["ip", "netns", "exec", NS, "nft", "list", "tables"],
                                capture_output=True, text=True, check=True).stdout
        return {line.split()[-1] for line in listed.splitlines() if "splitbench" in line}

    real.ensure(link_spec(host_b))
    first, state = guard.table_name(), os.environ["SPLITBENCH_STATE"]
    monkeypatch.setenv("SPLITBENCH_STATE", str(tmp_path / "second-run"))
    try:
        real.ensure(link_spec(host_b))
        second = guard.table_name()
        assert first != second and tables() == {first, second}
        teardown.teardown()  # the second run's end
    finally:
        monkeypatch.setenv("SPLITBENCH_STATE", state)  # the first run's, torn down after
    assert tables() == {first}


def test_a_listener_beyond_the_link_fails_the_launch_while_it_waits_for_health(
        host_b, tmp_path):
    """A process of the launch that binds UDP on every address of host B (which the
    guard, TCP's, does not cover) ends the health wait at its next check, long before
    the wait's own limit, naming the socket."""

    link = real.ensure(link_spec(host_b))
    b = host_from_spec("b", host_b)
    code = ("import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
            "s.bind(('0.0.0.0',47001));time.sleep(600)\n")
    b.spawn([b.python, "-c", code], role="other", key="sb-udp", log_path=tmp_path / "u.log")
    started = time.monotonic()
    with pytest.raises(lifecycle.LaunchError, match=r"host b: 0\.0\.0\.0:47001 UDP \(python3\)"):
        lifecycle.wait_healthy("http://127.0.0.1:9", {}, 60, "test server",
                               meanwhile=lifecycle.listeners_checked(link, ["sb-udp"]))
    assert time.monotonic() - started < 10
