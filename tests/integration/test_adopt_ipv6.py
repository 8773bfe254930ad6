"""A cable whose interfaces came up with IPv6 link-local addresses alone (thunderbolt-net
does): `adopt: true` is refused by the doctor, before anything starts, naming the
interface, its fe80:: address, what cannot use it and what to do; one with an IPv4
address beside it is adopted as it is. Real interfaces, in a namespace of the test's."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from splitbench.configuration.sections import LinkSpec
from splitbench.infra.hosts import Host, host_from_spec
from splitbench.links import real
from splitbench.pairs import ssh
from tests.conftest import needs_root
from tests.support.separate_host import config_block, separate_host_b  # noqa: F401 (a fixture)

pytestmark = needs_root()


@pytest.fixture
def cable():
    """Two hosts' ends of a cable: a veth pair, each end in a namespace of its own, up,
    with the IPv6 link-local address the kernel gives it and nothing else."""
    names = [f"sbv6a{os.getpid()}", f"sbv6b{os.getpid()}"]
    for name in names:
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", names[0], "link", "add", "tb0", "type", "veth", "peer",
                        "name", "tb0", "netns", names[1]], check=True)
        for name in names:
            subprocess.run(["ip", "netns", "exec", name, "sysctl", "-q", "-w",
                            "net.ipv6.conf.tb0.disable_ipv6=0"], check=True)
            subprocess.run(["ip", "-n", name, "link", "set", "tb0", "up"], check=True)
        yield [Host(side, netns=name) for side, name in zip("ab", names, strict=True)]
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], check=False)


def link_local(host: Host, ifname: str = "tb0") -> str:
    """The interface's fe80:: address, once the kernel has given it one (read on the
    host: in its namespace, or over SSH)."""
    for _ in range(50):
        shown = json.loads(host.run(["ip", "-j", "addr", "show", "dev", ifname]).stdout)[0]
        found = [a["local"] for a in shown.get("addr_info", [])
                 if a.get("family") == "inet6" and a["local"].startswith("fe80:")]
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError("no link-local address came up")


def test_a_link_with_only_fe80_addresses_is_refused_before_anything_starts(cable):
    host_a, host_b = cable
    addresses = [link_local(host) for host in cable]
    link = LinkSpec(adopt=True, interface_a="tb0", interface_b="tb0")
    lines = ssh._interfaces("tb", "usb4net", link, cable, "own")
    assert [line.mark for line in lines] == ["✗", "✗"], lines
    for line, host, address in zip(lines, cable, addresses, strict=True):
        assert line.text.startswith(
            f"link usb4net: host {host.name}'s interface tb0 has no IPv4 address to adopt "
            f"(it has only IPv6 {address}; llama.cpp's ggml-rpc-server binds IPv4 only): "
            "give addr_a/addr_b instead of adopt"), line.text
    # The link's own job refuses it the same way, having changed nothing.
    with pytest.raises(real.SetupError, match="has no IPv4 address to adopt"):
        real.adoptable_address(host_b, "tb0", "link usb4net")
    # With an IPv4 address beside it (link-local too), the interface is adopted as it is.
    for host, addr in ((host_a, "169.254.10.1/16"), (host_b, "169.254.10.2/16")):
        host.run(["ip", "addr", "add", addr, "dev", "tb0"])
    lines = ssh._interfaces("tb", "usb4net", link, cable, "own")
    assert [line.mark for line in lines] == ["✓", "✓"], lines
    assert real.adoptable_address(host_b, "tb0", "link usb4net") == "169.254.10.2"


@pytest.mark.slow
def test_the_same_cable_to_a_b_that_is_another_machine_is_refused_over_ssh(
        separate_host_b):  # noqa: F811 (the fixture)
    """On the separate-filesystem B, reached over SSH as its unprivileged user: a second
    cable (a veth pair from A into B's namespace) with fe80:: addresses alone."""
    b = separate_host_b()
    host_b = host_from_spec("b", config_block(b))
    ns = b["netns"]
    subprocess.run(["ip", "link", "add", "sbv6c", "type", "veth", "peer", "name", "tb1",
                    "netns", ns], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                        "net.ipv6.conf.tb1.disable_ipv6=0"], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "tb1", "up"], check=True)
        subprocess.run(["ip", "link", "set", "sbv6c", "up"], check=True)
        address = link_local(host_b, "tb1")
        link = LinkSpec(adopt=True, interface_a="sbv6c", interface_b="tb1")
        (line,) = ssh._interfaces("tb", "usb4net", link, [host_b], "own")
        assert line.mark == "✗" and line.text.startswith(
            f"link usb4net: host b's interface tb1 has no IPv4 address to adopt (it has "
            f"only IPv6 {address}; llama.cpp's ggml-rpc-server binds IPv4 only)"), line
    finally:
        subprocess.run(["ip", "link", "del", "sbv6c"], check=False)

