"""The embedded pair: both hosts on this machine, each a network namespace (or, without
root, this machine's loopback), the links veth pairs shaped by the lab (`links/lab.py`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from splitbench.contracts.slices import HostSlice, LinkSlice, SweepSlice
from splitbench.links import lab, readiness
from splitbench.links.link import Link
from splitbench.links.readiness import BAD, OK, Line
from splitbench.pairs.base import PairKind, placed

if TYPE_CHECKING:  # a cell's job asks its kind for its link, and must not pay for pydantic
    from splitbench.configuration import Config, Pair

# Index of a delay sweep's first link: far from the configured links' (1, 2, ...).
FIRST_SWEEP_INDEX = 200


class Embedded(PairKind):
    name = "embedded"
    on_this_machine = True
    sweep_on_baseline_link = False

    def link_keys(self, pair: Pair, link: str, given: dict[str, Any]) -> dict[str, Any]:
        from splitbench.configuration import link_index  # planning: the config is read

        # Every emulated link takes the same path (the delay relay, or netem, at zero
        # delay for a link without one): a difference between links is then what is
        # emulated, not the relay's own cost, which a link without it would not pay.
        return {"index": link_index(link, given), "same_path_at_zero_delay": True}

    def ensure_link(self, spec: LinkSlice) -> Link:
        return lab.ensure_link(spec)

    def sweep_link(self, spec: SweepSlice, index: int, delay_ms: float) -> Link:
        return lab.ensure_link(self.sweep_point(spec["pair"], index, delay_ms))

    def sweep_point(self, pair: str, index: int, delay_ms: float) -> LinkSlice:
        """A sweep point's link: an unshaped veth with only the added delay."""
        return {"pair": pair, "link": f"rt{index}", "index": FIRST_SWEEP_INDEX + index,
                "mode": self.name, "delay_ms": delay_ms, "same_path_at_zero_delay": True}

    def doctor_lines(self, config: Config, pair: str, spec: Pair) -> list[Line]:
        lines = readiness.pair_hosts(pair, spec.hosts.given())
        shaped = [name for name, link in spec.links.items() if link.rate_gbit or link.delay_ms]
        if os.geteuid() == 0:
            lines.append(Line(OK, pair, "root: each host a network namespace, links shaped "
                                        "with tc"))
        elif shaped:
            lines.append(Line(BAD, pair, f"not root: links {', '.join(shaped)} cannot be "
                                         "shaped (the lab falls back to the shared loopback)",
                              "run as root (network namespaces and tc need it)"))
        return lines

    def host_text(self, pair: str, side: str, host: HostSlice,
                  emulations: set[str]) -> str:
        if "netns-veth" in emulations:
            text = f"embedded (namespace {lab.namespace(pair, side)})"
        elif emulations == {"loopback"}:
            text = "embedded (this machine, loopback: no namespaces without root)"
        else:
            text = "embedded"
        return ", ".join([text, *placed(host)])
