"""The pair-kind seam (splitbench/pairs): every difference between an embedded and an
SSH pair is asked of the pair's kind, and nothing outside the seam compares a kind's
name; the config's keys per kind, the schema and the seam name the same kinds; a link's
slice, which a rule's command carries, is what results measured before the seam hold."""

from __future__ import annotations

import ast
import json
import typing

import pytest

from splitbench import pairs
from splitbench.configuration import checks, parsed, sections
from splitbench.matrix import plan
from splitbench.pairs import ssh
from tests.conftest import ROOT, tiny_config


def _names_compared(path) -> list[tuple[int, str]]:
    """(line, kind name) of each comparison with a pair kind's name in a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                for item in ast.walk(operand):
                    if isinstance(item, ast.Constant) and item.value in pairs.KINDS:
                        found.append((node.lineno, item.value))
    return found


def test_no_module_outside_the_seam_compares_a_pair_kinds_name(tmp_path):
    outside = {str(path.relative_to(ROOT)): found
               for path in (ROOT / "splitbench").rglob("*.py")
               if "pairs" not in path.relative_to(ROOT / "splitbench").parts[:1]
               and (found := _names_compared(path))}
    assert outside == {}
    probe = tmp_path / "probe.py"  # the scan sees such comparisons where they are
    probe.write_text('x = 1\nif spec.mode == "ssh" or "embedded" != mode:\n    pass\n')
    assert _names_compared(probe) == [(2, "ssh"), (2, "embedded")]


def test_the_config_the_schema_and_the_seam_name_the_same_kinds():
    written = set(typing.get_args(sections.Pair.model_fields["mode"].annotation))
    assert written == set(checks.PAIR_KINDS) == set(pairs.KINDS)
    assert all(pairs.of(name).name == name for name in pairs.KINDS)


def test_each_kinds_link_slice_keeps_the_keys_and_order_results_were_made_with():
    config = tiny_config()
    embedded = plan.link_slice(parsed(config), "t", "slow")
    assert list(embedded) == ["pair", "link", "mode", "rate_gbit", "delay_ms", "index",
                              "same_path_at_zero_delay"]
    assert embedded["mode"] == "embedded" and embedded["same_path_at_zero_delay"] is True
    config["pairs"]["t"] = {
        "mode": "ssh", "hosts": {"a": {}, "b": {"ssh": "bench@10.213.9.2"}},
        "links": {link: {"interface_a": "a0", "interface_b": "b0", "addr_a": "10.0.9.1",
                         "addr_b": "10.0.9.2"}
                  for link in config["pairs"]["t"]["links"]}}
    real = plan.link_slice(parsed(config), "t", "slow")
    assert list(real) == ["pair", "link", "mode", "interface_a", "interface_b", "addr_a",
                          "addr_b", "hosts", "firewall"]
    assert real["hosts"]["b"]["ssh"] == "bench@10.213.9.2"
    json.dumps(real)  # a rule's command carries it as JSON


@pytest.mark.parametrize(("mode", "on_this_machine", "sweep_on_baseline_link"),
                         [("embedded", True, False), ("ssh", False, True)])
def test_what_each_kind_says_of_its_hosts(mode, on_this_machine, sweep_on_baseline_link):
    kind = pairs.of(mode)
    assert (kind.on_this_machine, kind.sweep_on_baseline_link) == (
        on_this_machine, sweep_on_baseline_link)


def test_the_report_says_where_hosts_are_by_their_kind():
    host_b = {"ssh": "bench@b.lan", "ssh_port": 2222, "node": "n3"}
    assert pairs.of("ssh").host_text("rig", "b", host_b, set()) == (
        "ssh bench@b.lan port 2222, node n3")
    assert pairs.of("ssh").host_text("rig", "a", {}, set()) == "this machine (runs splitbench)"
    assert pairs.of("embedded").host_text("lab", "b", {}, {"loopback"}).startswith(
        "embedded (this machine, loopback")
    # results written before the kind was recorded: the lab's emulations tell
    assert pairs.in_results(None, {"netns-veth"}) is pairs.EMBEDDED
    assert pairs.in_results(None, {"tbf"}) is None


def test_a_sweep_on_a_real_pair_names_its_baseline_link():
    assert pairs.of_sweep({"pair": "lab"}) is pairs.EMBEDDED
    assert isinstance(pairs.of_sweep({"pair": "rig", "link": {"mode": "ssh"}}), ssh.OverSsh)
