"""What `adopt: true` takes of an interface (links/real.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from splitbench.links import real


class _Host:
    name = "b"

    def __init__(self, addresses: list[dict]) -> None:
        self.shown = [{"ifname": "thunderbolt0", "addr_info": addresses}]

    def run(self, argv):
        return SimpleNamespace(stdout=json.dumps(self.shown))


def test_an_interface_with_ipv4_is_adopted_as_it_is():
    host = _Host([{"family": "inet6", "local": "fe80::1"},
                  {"family": "inet", "local": "169.254.3.7"}])
    assert real.adoptable_address(host, "thunderbolt0", "link tb") == "169.254.3.7"


def test_one_with_only_ipv6_link_local_is_refused_with_why_and_the_fix():
    host = _Host([{"family": "inet6", "local": "fe80::1c2:3ff:fe44:5566"}])
    with pytest.raises(real.SetupError) as said:
        real.adoptable_address(host, "thunderbolt0", "link tb")
    assert str(said.value) == (
        "link tb: host b's interface thunderbolt0 has no IPv4 address to adopt (it has "
        "only IPv6 fe80::1c2:3ff:fe44:5566; llama.cpp's ggml-rpc-server binds IPv4 only): "
        "give addr_a/addr_b instead of adopt (the run adds them and removes them at its "
        "end), or add one by hand (ip addr add 169.254.10.1/16 dev thunderbolt0)")
    with pytest.raises(real.SetupError, match=r"no IPv4 address to adopt: give"):
        real.adoptable_address(_Host([]), "thunderbolt0", "link tb")
