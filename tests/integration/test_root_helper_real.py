"""The root helper run for real (as root, in a network namespace of the test's own):
each verb changes what it names and nothing else, the table it builds drops what the
guard must, and a refused call leaves the host as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from splitbench.remote import root_helper
from tests.conftest import needs_root

HELPER = root_helper.__file__
TABLE, OTHER = "splitbench_00000000aa", "splitbench_00000000bb"


@pytest.fixture
def namespace():
    if os.geteuid() != 0:
        pytest.skip("needs root (a network namespace)")
    name = f"sbrh{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", name, "link", "add", "sbrh0", "type", "veth", "peer", "name",
                    "sbrh1"], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def helper(namespace: str, *argv: str, uid: int | None = None) -> subprocess.CompletedProcess:
    """The helper as sudo would run it for `uid` (SUDO_UID), inside the namespace."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
           **({"SUDO_UID": str(uid)} if uid is not None else {})}
    return subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-I", HELPER,
                           *argv], capture_output=True, text=True, env=env, timeout=60)


def addresses(namespace: str) -> list[str]:
    shown = json.loads(subprocess.run(["ip", "-n", namespace, "-j", "addr", "show", "dev",
                                       "sbrh0"], capture_output=True, text=True).stdout)[0]
    return [a["local"] for a in shown.get("addr_info", [])]


def state(namespace: str) -> str:
    """What the verbs may change: the namespace's interfaces, addresses and tables."""
    links = subprocess.run(["ip", "-n", namespace, "-j", "addr"], capture_output=True,
                           text=True, check=True).stdout
    tables = subprocess.run(["ip", "netns", "exec", namespace, "nft", "list", "ruleset"],
                            capture_output=True, text=True, check=True).stdout
    return links + tables


@needs_root()
def test_each_verb_changes_what_it_names(namespace):
    assert helper(namespace, "link-up", "sbrh0").returncode == 0
    assert helper(namespace, "mtu", "sbrh0", "9000").returncode == 0
    assert helper(namespace, "addr-replace", "sbrh0", "10.77.0.1/30").returncode == 0
    shown = json.loads(subprocess.run(["ip", "-n", namespace, "-j", "addr", "show", "dev",
                                       "sbrh0"], capture_output=True, text=True).stdout)[0]
    assert shown["mtu"] == 9000 and "UP" in shown["flags"]
    assert [a["local"] for a in shown["addr_info"]] == ["10.77.0.1"]
    spec = {"interfaces": ["sbrh0"], "addresses": ["10.77.0.1"], "ports": ["20480-20511"],
            "made": ["[addr:sbrh0:10.77.0.1/30]"]}
    assert helper(namespace, "guard-apply", TABLE, json.dumps(spec), uid=1000).returncode == 0
    listed = json.loads(helper(namespace, "guard-list").stdout)
    assert listed == {TABLE: ["[addr:sbrh0:10.77.0.1/30]", "[owner:1000]"]}
    rules = subprocess.run(["ip", "netns", "exec", namespace, "nft", "list", "table", "inet",
                            TABLE], capture_output=True, text=True, check=True).stdout
    assert "meta skuid != 1000 drop" in rules and "ip daddr 10.77.0.1 drop" in rules
    # Another user may neither replace nor delete it; its owner may.
    before = state(namespace)
    for argv in (["guard-delete", TABLE], ["guard-apply", TABLE, json.dumps(spec)]):
        refused = helper(namespace, *argv, uid=1001)
        assert refused.returncode == 2 and "another user's run's (uid 1000)" in refused.stderr
    assert state(namespace) == before
    # An undo another run's table still holds is left for that run to make.
    other = {**spec, "made": ["[addr:sbrh0:10.77.0.1/30]"]}
    assert helper(namespace, "guard-apply", OTHER, json.dumps(other), uid=1000).returncode == 0
    kept = helper(namespace, "unless-held", TABLE, "[addr:sbrh0:10.77.0.1/30]", "addr-del",
                  "sbrh0", "10.77.0.1/30", uid=1000)
    assert kept.returncode == 0 and addresses(namespace) == ["10.77.0.1"]
    assert helper(namespace, "guard-delete", OTHER, uid=1000).returncode == 0
    gone = helper(namespace, "unless-held", TABLE, "[addr:sbrh0:10.77.0.1/30]", "addr-del",
                  "sbrh0", "10.77.0.1/30", uid=1000)
    assert gone.returncode == 0 and addresses(namespace) == []
    assert helper(namespace, "guard-delete", TABLE, uid=1000).returncode == 0
    assert TABLE not in state(namespace)


@needs_root()
@pytest.mark.parametrize("argv", [
    ["netns", "exec", "x", "/bin/sh"],
    ["link-down", "lo"],
    ["addr-replace", "sbrh0", "127.0.0.5/8"],
    ["guard-delete", "filter"],
    ["guard-apply", TABLE, '{"interfaces": ["sbrh0"], "ports": ["20480-20511"], '
                           '"rules": "flush ruleset"}'],
    ["unless-held", TABLE, "[up:sbrh0]", "wakeup"],
])
def test_a_refused_call_leaves_the_host_as_it_was(namespace, argv):
    before = state(namespace)
    refused = helper(namespace, *argv, uid=1000)
    assert refused.returncode == 2 and "splitbench-root: refused:" in refused.stderr
    assert state(namespace) == before


LISTEN_ON = ("import socket, sys, time; s = socket.socket(); s.bind((sys.argv[1], "
             "int(sys.argv[2]))); s.listen(); print('up', flush=True); time.sleep(30)")
CONNECT_TO = ("import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), "
              "timeout=1.5).close()")


def as_user(namespace: str, uid: int, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", namespace, "setpriv", "--reuid", str(uid), "--regid",
            str(uid), "--clear-groups", *argv]


@needs_root()
def test_other_users_reach_no_port_of_a_link_address_over_loopback(namespace):
    """vLLM's ranks listen on ports of their own on a link address, outside the run's
    block: over loopback, only the run's user (the table's owner) reaches them."""
    subprocess.run(["ip", "-n", namespace, "link", "set", "lo", "up"], check=True)
    assert helper(namespace, "link-up", "sbrh0").returncode == 0
    assert helper(namespace, "addr-replace", "sbrh0", "10.77.0.1/30").returncode == 0
    spec = {"interfaces": ["sbrh0"], "addresses": ["10.77.0.1"], "ports": ["20480-20511"]}
    assert helper(namespace, "guard-apply", TABLE, json.dumps(spec), uid=4242).returncode == 0
    rank = subprocess.Popen(as_user(namespace, 4242, sys.executable, "-c", LISTEN_ON,
                                    "10.77.0.1", "40000"), stdout=subprocess.PIPE, text=True)
    try:
        assert rank.stdout.readline().strip() == "up"
        reached = {uid: subprocess.run(as_user(namespace, uid, sys.executable, "-c",
                                               CONNECT_TO, "10.77.0.1", "40000"),
                                       capture_output=True, text=True).returncode
                   for uid in (4242, 4343)}
    finally:
        rank.kill()
        rank.wait()
    assert reached == {4242: 0, 4343: 1}, reached


@needs_root()
def test_on_a_lan_a_neighbour_with_the_peers_address_but_not_its_mac_is_dropped(namespace):
    """The guarded host's LAN interface lets the other host's address through to the
    run's ports, from the other host's MAC alone: the same address sent from another
    MAC (a neighbour who took it) is dropped."""
    peer = f"{namespace}p"
    subprocess.run(["ip", "netns", "add", peer], check=True)
    try:
        run = [["ip", "-n", namespace, "link", "set", "sbrh1", "netns", peer],
               ["ip", "-n", namespace, "link", "set", "lo", "up"],
               ["ip", "-n", namespace, "addr", "add", "10.77.0.1/24", "dev", "sbrh0"],
               ["ip", "-n", namespace, "link", "set", "sbrh0", "up"],
               ["ip", "-n", peer, "addr", "add", "10.77.0.2/24", "dev", "sbrh1"],
               ["ip", "-n", peer, "link", "set", "sbrh1", "up"],
               ["ip", "netns", "exec", peer, "ping", "-c", "1", "-W", "2", "10.77.0.1"]]
        for argv in run:
            subprocess.run(argv, check=True, capture_output=True)
        neigh = json.loads(subprocess.run(
            ["ip", "-n", namespace, "-j", "neigh", "show", "to", "10.77.0.2"],
            capture_output=True, text=True, check=True).stdout)
        mac = neigh[0]["lladdr"]
        spec = {"interfaces": [], "addresses": [], "ports": ["20480-20511"],
                "lan_peers": {"sbrh0": ["10.77.0.2"]}, "lan_macs": {"sbrh0": [mac]}}
        applied = helper(namespace, "guard-apply", TABLE, json.dumps(spec))
        assert applied.returncode == 0, applied.stderr
        worker = subprocess.Popen(["ip", "netns", "exec", namespace, sys.executable, "-c",
                                   LISTEN_ON.replace("time.sleep(30)", "[s.accept()[0] "
                                                     "for _ in range(9)]"), "10.77.0.1",
                                   "20480"], stdout=subprocess.PIPE, text=True)
        try:
            assert worker.stdout.readline().strip() == "up"

            def reaches() -> int:
                return subprocess.run(["ip", "netns", "exec", peer, sys.executable, "-c",
                                       CONNECT_TO, "10.77.0.1", "20480"],
                                      capture_output=True).returncode

            first = reaches()
            subprocess.run(["ip", "-n", peer, "link", "set", "sbrh1", "address",
                            "02:00:00:00:77:99"], check=True)
            spoofed = reaches()
        finally:
            worker.kill()
            worker.wait()
        assert (first, spoofed) == (0, 1)
    finally:
        subprocess.run(["ip", "netns", "del", peer], check=False)
