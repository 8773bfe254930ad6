"""The firewall guard's rules and its reading of listeners (the real thing: the SSH lab
pair, tests/integration/test_ssh.py)."""

from __future__ import annotations

from types import SimpleNamespace

from splitbench.links import guard


def test_the_table_drops_the_link_addresses_and_the_ports_off_other_interfaces():
    rules = guard.ruleset(["sbssh-a", "eth1", "eth1"], ["10.0.0.1", "fe80::1%eth1"])
    commands = rules.split("; ")
    # Replaced whole, in one batch: made if missing, deleted, made again.
    assert commands[:3] == ["add table inet splitbench", "delete table inet splitbench",
                            "add table inet splitbench"]
    assert 'iifname { "lo", "eth1", "sbssh-a" } accept' in rules
    assert "ip daddr { 10.0.0.1 } drop" in rules
    assert "ip6 daddr { fe80::1 } drop" in rules
    assert "tcp dport { 50052-50055, 29501-29518 } drop" in rules
    assert "policy accept" in rules  # it only ever drops
    assert "ip6 daddr" not in guard.ruleset(["eth1"], ["10.0.0.1"])


class _Host:
    name = "b"

    def __init__(self, ps: str, ss: str):
        self.out = {"ps": ps, "ss": ss}

    def run(self, argv):
        return SimpleNamespace(stdout=self.out[argv[0]])


SS = """\
LISTEN 0 4096 *:29501 *:* users:(("VLLM::Worker_TP",pid=20,fd=13))
LISTEN 0 4096 10.0.0.1:41771 0.0.0.0:* users:(("VLLM::Worker_TP",pid=20,fd=73))
LISTEN 0 100 0.0.0.0:41000 0.0.0.0:* users:(("VLLM::EngineCor",pid=21,fd=24))
LISTEN 0 100 [::]:41001 [::]:* users:(("other",pid=30,fd=3))
LISTEN 0 100 [::]:41002 [::]:* users:(("VLLM::Worker_TP",pid=20,fd=9),("x",pid=22,fd=1))
"""


def test_only_the_launchs_own_wildcard_listeners_outside_the_guard_are_named():
    # pids 20, 21, 22 are in session 10 (the launch's); 30 is another program's.
    host = _Host("10 10\n20 10\n21 10\n22 10\n30 30\n", SS)
    assert guard.uncovered_listeners(host, [10]) == [
        "0.0.0.0:41000 (VLLM::EngineCor)", "[::]:41002 (VLLM::Worker_TP, x)"]
    assert guard.uncovered_listeners(host, []) == []
