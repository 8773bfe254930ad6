"""The root helper's verbs take only what a link needs: every argument is checked before
anything runs, and what it cannot be made to do (a shell, another table, another
user's table, the host's own network) is refused with the argument named."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from splitbench.remote import root_helper
from splitbench.remote.root_helper import Refused, commands

# An interface that exists on any Linux machine besides lo: made up per test where needed.
NO_ROUTES: set = set()
SPEC = {"interfaces": ["eth1"], "addresses": ["10.0.0.1"], "ports": ["20480-20511"]}


def some_interface() -> str:
    found = sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name != "lo")
    if not found:
        pytest.skip("no interface but lo on this machine")
    return found[0]


@pytest.mark.parametrize("verb, args, said", [
    ("exec", ["/bin/sh"], "unknown verb 'exec'"),
    ("netns", ["exec", "x", "/bin/sh"], "unknown verb 'netns'"),
    ("link-up", ["eth0; sh"], "not an interface name"),
    ("link-up", ["../../x"], "not an interface name"),
    ("link-up", ["lo"], "lo is not a link interface"),
    ("link-up", ["nosuch0"], "no interface nosuch0"),
    ("link-up", [], "link-up takes 1 argument, got 0"),
    ("mtu", ["IFACE", "9999999"], "not an MTU"),
    ("mtu", ["IFACE", "-1"], "not an MTU"),
    ("addr-replace", ["IFACE", "127.0.0.2/8"], "not a host address"),
    ("addr-replace", ["IFACE", "224.0.0.1/4"], "not a host address"),
    ("addr-replace", ["IFACE", "0.0.0.0/0"], "not a host address"),
    ("addr-replace", ["IFACE", "10.0.0.1"], "give the prefix"),
    ("addr-replace", ["IFACE", "-f /etc/shadow"], "not an address"),
    ("guard-delete", ["filter"], "not a splitbench table"),
    ("guard-delete", ["splitbench_0123456789; flush ruleset"], "not a splitbench table"),
    ("guard-apply", ["splitbench_0123456789", "-f /etc/shadow"], "SPEC is not JSON"),
    ("guard-apply", ["splitbench_0123456789", json.dumps({**SPEC, "uid": 0})],
     "unknown keys: uid"),
    ("guard-apply", ["splitbench_0123456789", json.dumps({**SPEC, "ports": ["1-65535"]})],
     "not a run's block of ports"),
    ("guard-apply", ["splitbench_0123456789",
                     json.dumps({**SPEC, "made": ['[up:eth1]"; flush ruleset; "']})],
     "not an interface change"),
    ("guard-apply", ["splitbench_0123456789", json.dumps({**SPEC, "made": ["[owner:0]"]})],
     "not an interface change"),
    ("guard-apply", ["splitbench_0123456789",
                     json.dumps({**SPEC, "interfaces": ['eth1" } accept; flush ruleset']})],
     "not an interface name"),
])
def test_each_argument_is_checked_before_anything_runs(verb, args, said):
    args = [some_interface() if a == "IFACE" else a for a in args]
    with pytest.raises(Refused, match=said.replace("(", r"\(")):
        commands(verb, args, 1000, existing={}, routes=NO_ROUTES)


def test_the_interface_that_holds_a_default_route_is_left_alone():
    name = some_interface()
    with pytest.raises(Refused, match=f"{name} holds a default route"):
        commands("addr-replace", [name, "10.0.0.1/30"], 1000, routes={name})
    argv = commands("addr-replace", [name, "10.0.0.1/30"], 1000, routes=NO_ROUTES)
    assert argv == [[root_helper.tool("ip"), "addr", "replace", "10.0.0.1/30", "dev", name]]


def test_a_table_is_built_here_with_the_callers_uid_and_its_owner():
    argv = commands("guard-apply", ["splitbench_0123456789", json.dumps(
        {**SPEC, "made": ["[up:eth1]"], "lan_peers": {"eth0": ["192.0.2.7"]}})], 1000,
        existing={})
    (nft, rules), = argv
    assert nft == root_helper.tool("nft")
    assert 'comment "[owner:1000][up:eth1]"' in rules
    assert "meta skuid != 1000 drop" in rules
    assert 'iifname "eth0" ip saddr { 192.0.2.7 } tcp dport { 20480-20511 } accept' in rules
    assert "flush" not in rules and "include" not in rules


def test_another_users_table_is_neither_replaced_nor_deleted():
    theirs = {"splitbench_0123456789": ["[owner:1001]", "[up:eth1]"]}
    for verb, args in (("guard-delete", ["splitbench_0123456789"]),
                       ("guard-apply", ["splitbench_0123456789", json.dumps(SPEC)])):
        with pytest.raises(Refused, match=r"another user's run's \(uid 1001\)"):
            commands(verb, args, 1000, existing=theirs)
        assert commands(verb, args, 1001, existing=theirs)  # its owner's
        assert commands(verb, args, 0, existing=theirs)  # root's


def test_tools_come_from_root_owned_system_directories_only(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("needs root (a root-owned file)")
    fake = tmp_path / "nft"
    fake.write_text("#!/bin/sh\n")
    monkeypatch.setattr(root_helper, "SYSTEM_DIRS", (str(tmp_path),))
    fake.chmod(0o775)  # writable by its group: another user could have put it there
    with pytest.raises(Refused, match="no root-owned nft"):
        root_helper.tool("nft")
    fake.chmod(0o755)
    assert root_helper.tool("nft") == str(fake)
    monkeypatch.setattr(root_helper, "SYSTEM_DIRS", ("/nonexistent",))
    with pytest.raises(Refused):
        root_helper.tool("nft")


def test_sudo_s_caller_is_the_uid_the_rules_let_through(monkeypatch):
    monkeypatch.setenv("SUDO_UID", "1234")
    assert root_helper.caller_uid() == (1234 if os.geteuid() == 0 else os.getuid())
    monkeypatch.delenv("SUDO_UID")
    assert root_helper.caller_uid() == os.getuid()


def test_a_refusal_names_itself_and_runs_nothing(capsys):
    assert root_helper.main(["netns", "exec", "x", "/bin/sh"]) == 2
    assert "splitbench-root: refused: unknown verb 'netns'" in capsys.readouterr().err


@pytest.mark.parametrize(("macs", "said"), [
    ({"eth0": ["52:54:00:12:34:5"]}, "not a MAC address"),
    ({"eth0": ["52:54:00:12:34:56; flush ruleset"]}, "not a MAC address"),
    ({"eth9": ["52:54:00:12:34:56"]}, "lan_macs is not an object of lan_peers' interfaces"),
])
def test_a_lan_peers_mac_is_checked(macs, said):
    spec = {**SPEC, "lan_peers": {"eth0": ["192.0.2.7"]}, "lan_macs": macs}
    with pytest.raises(Refused, match=said):
        commands("guard-apply", ["splitbench_0123456789", json.dumps(spec)], 1000,
                 existing={})
