"""The firewall guard's rules and its reading of listeners (the real thing: the SSH lab
pair, tests/integration/test_ssh.py)."""

from __future__ import annotations

from types import SimpleNamespace

from splitbench.links import guard
from splitbench.links.link import Ports


def test_the_table_drops_the_link_addresses_and_the_ports_off_other_interfaces():
    rules = guard.ruleset(["sbssh-a", "eth1", "eth1"], ["10.0.0.1", "fe80::1%eth1"],
                          [50180, 50052, 50180], "splitbench_0123456789", uid=1000)
    commands = rules.split("; ")
    # The run's own table, replaced whole in one batch: made if missing, deleted, made.
    assert commands[:3] == ["add table inet splitbench_0123456789",
                            "delete table inet splitbench_0123456789",
                            "add table inet splitbench_0123456789"]
    assert 'iifname { "lo", "eth1", "sbssh-a" } accept' in rules
    assert "ip daddr { 10.0.0.1 } drop" in rules
    assert "ip6 daddr { fe80::1 } drop" in rules
    # The run's blocks of ports (one per pair on this host), and no other port.
    assert "tcp dport { 50052-50179, 50180-50307 } drop" in rules
    # Other users' connections over loopback to the run's ports, and only those.
    assert ('output oifname "lo" tcp dport { 50052-50179, 50180-50307 } meta skuid != 1000 '
            "drop") in rules
    assert rules.count("policy accept") == 2  # it only ever drops
    assert "ip6 daddr" not in guard.ruleset(["eth1"], ["10.0.0.1"], [50052], "t")
    assert "skuid" not in guard.ruleset(["eth1"], ["10.0.0.1"], [50052], "t")


def test_on_the_lan_only_the_other_host_reaches_the_runs_ports():
    rules = guard.ruleset(["eth1"], ["10.0.0.1"], [50052], "t",
                          lan_peers={"eno1": ["192.168.1.20", "fe80::2%eno1"]})
    commands = rules.split("; ")
    allow_v4 = 'add rule inet t input iifname "eno1" ip saddr { 192.168.1.20 } tcp dport ' \
        "{ 50052-50179 } accept"
    allow_v6 = 'add rule inet t input iifname "eno1" ip6 saddr { fe80::2 } tcp dport ' \
        "{ 50052-50179 } accept"
    assert allow_v4 in commands and allow_v6 in commands
    # Before the port rule that drops everyone else; the LAN interface is not let
    # through whole, and its own address is not among those dropped.
    drop = commands.index("add rule inet t input tcp dport { 50052-50179 } drop")
    assert commands.index(allow_v4) < drop and commands.index(allow_v6) < drop
    assert '"eno1" }' not in rules and "192.168.1.20 } drop" not in rules


def test_each_run_has_a_table_of_its_own(tmp_path, monkeypatch):
    names = set()
    for run in ("one", "two", "one"):
        monkeypatch.setenv("SPLITBENCH_STATE", str(tmp_path / run))
        names.add(guard.table_name())
    assert len(names) == 2 and all(n.startswith("splitbench_") for n in names)


class _Host:
    name = "b"

    def __init__(self, ps: str, ss: str):
        self.out = {"ps": ps, "ss": ss}

    def run(self, argv, check=True):
        return SimpleNamespace(stdout=self.out[argv[0]])


SS = """\
tcp LISTEN 0 4096 *:50060 *:* users:(("VLLM::Worker_TP",pid=20,fd=13))
tcp LISTEN 0 4096 10.0.0.1:41771 0.0.0.0:* users:(("VLLM::Worker_TP",pid=20,fd=73))
tcp LISTEN 0 100 0.0.0.0:41000 0.0.0.0:* users:(("VLLM::EngineCor",pid=21,fd=24))
tcp LISTEN 0 100 [::]:41001 [::]:* users:(("other",pid=30,fd=3))
tcp LISTEN 0 100 [::]:41002 [::]:* users:(("VLLM::Worker_TP",pid=20,fd=9),("x",pid=22,fd=1))
udp UNCONN 0 0 0.0.0.0:50053 0.0.0.0:* users:(("VLLM::Worker_TP",pid=20,fd=30))
udp UNCONN 0 0 10.0.0.1:5353 0.0.0.0:* users:(("VLLM::Worker_TP",pid=20,fd=31))
tcp LISTEN 0 100 192.168.1.5:41500 0.0.0.0:* users:(("VLLM::Worker_TP",pid=20,fd=40))
tcp LISTEN 0 100 127.0.0.1:41600 0.0.0.0:* users:(("VLLM::Worker_TP",pid=20,fd=41))
"""


def test_only_the_launchs_own_listeners_beyond_the_link_outside_the_guard_are_named():
    # pids 20, 21, 22 are in session 10 (the launch's); 30 is another program's.
    host = _Host("10 10\n20 10\n21 10\n22 10\n30 30\n", SS)
    link = {"10.0.0.1"}  # the link's address: its listeners are the link's
    # UDP on every address is never covered (the guard's port rule is TCP's).
    # The run's block is 50052-50179: the rendezvous store's port 50060 is covered.
    assert guard.uncovered_listeners(host, [10], Ports(50052), kept_to=link) == [
        "0.0.0.0:41000 (VLLM::EngineCor)", "[::]:41002 (VLLM::Worker_TP, x)",
        "0.0.0.0:50053 UDP (VLLM::Worker_TP)", "192.168.1.5:41500 (VLLM::Worker_TP)"]
    assert guard.uncovered_listeners(host, [], Ports(50052), kept_to=link) == []
    # Another run's block covers none of them.
    assert guard.uncovered_listeners(host, [10], Ports(50180), kept_to=link)[0] == (
        "*:50060 (VLLM::Worker_TP)")
    # firewall: own: splitbench covers nothing, so the rendezvous port is named too.
    assert guard.uncovered_listeners(host, [10], None, kept_to=link)[0] == (
        "*:50060 (VLLM::Worker_TP)")
    # Loopback stays on the host; an address the link does not have is beyond it.
    beyond = guard.uncovered_listeners(host, [10], None, kept_to=set())
    assert "10.0.0.1:41771 (VLLM::Worker_TP)" in beyond
    assert not any(line.startswith("127.0.0.1:") for line in beyond)


def test_on_the_lan_the_other_hosts_frames_must_come_from_its_mac_too():
    """A neighbour who takes the other host's IP address sends from its own MAC."""
    rules = guard.ruleset(["eth1"], ["10.0.0.1"], [50052], "t",
                          lan_peers={"eno1": ["192.168.1.20"]},
                          lan_macs={"eno1": ["52:54:00:12:34:56"]})
    assert ('add rule inet t input iifname "eno1" ether saddr { 52:54:00:12:34:56 } ip '
            "saddr { 192.168.1.20 } tcp dport { 50052-50179 } accept") in rules.split("; ")
