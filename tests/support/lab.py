"""The embedded lab as the tests use it: the link check's settings and a detour that sends
host B's address around the link (so that its verification must fail)."""

from __future__ import annotations

import subprocess

from splitbench.configuration import LinkCheck, defaults
from splitbench.links.link import Link

# A link check's settings as planned for a config that sets none of `link_check:`.
LINK_CHECK = {**defaults(LinkCheck, exclude=("sockperf",)), "hold_wakeup_latency": True}


def detour(link: Link) -> None:
    """A second veth between A and B, and a host route on A that sends B's link address
    over it: traffic for B then bypasses the link's own interface."""
    ns_a, ns_b = link.host_a.netns, link.host_b.netns
    for argv in (
        ["ip", "link", "add", "sbtd-a", "type", "veth", "peer", "name", "sbtd-b"],
        ["ip", "link", "set", "sbtd-a", "netns", ns_a],
        ["ip", "link", "set", "sbtd-b", "netns", ns_b],
        ["ip", "-n", ns_a, "addr", "add", "10.250.9.1/30", "dev", "sbtd-a"],
        ["ip", "-n", ns_b, "addr", "add", "10.250.9.2/30", "dev", "sbtd-b"],
        ["ip", "-n", ns_a, "link", "set", "sbtd-a", "up"],
        ["ip", "-n", ns_b, "link", "set", "sbtd-b", "up"],
        ["ip", "-n", ns_a, "route", "add", f"{link.addr_b}/32", "via", "10.250.9.2"],
    ):
        subprocess.run(argv, check=True, capture_output=True)
