"""A kind of pair: where its two hosts live, how its links are set up, what the doctor
asks of it, and what the report says of its hosts.

Each kind is one module behind this base class, as each backend is behind
`splitbench.backends.Backend`: `embedded.py` (both hosts on this machine, the links
emulated by the lab) and `ssh.py` (host B another machine reached over SSH, the links
real cables). A cluster profile runs pairs of either kind on its nodes. Code outside
this package asks a pair's kind (`splitbench.pairs.of`) and never compares its name.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from splitbench.contracts.slices import HostSlice, LinkSlice, SweepSlice
from splitbench.infra import turns
from splitbench.links.link import Link
from splitbench.links.readiness import Line

if TYPE_CHECKING:  # a cell's job asks its kind for its link, and must not pay for pydantic
    from splitbench.configuration import Config, Pair


class PairKind(ABC):
    """One kind of pair. `name` is what a pair's `mode:` says."""

    name: str
    # Both hosts run on this machine, in its own environment (its Python, its vLLM),
    # and their links use its loopback or its network namespaces.
    on_this_machine: bool
    # A delay sweep runs on the pair's baseline link (behind relays), which its link
    # job verifies first; otherwise the sweep makes links of its own.
    sweep_on_baseline_link: bool

    @abstractmethod
    def link_keys(self, pair: Pair, link: str, given: dict[str, Any]) -> dict[str, Any]:
        """What a link's slice holds besides its pair, name, kind and config keys."""

    @abstractmethod
    def ensure_link(self, spec: LinkSlice) -> Link:
        """The link, set up (or adopted) once per run and then reused; the run's
        teardown undoes what the set-up changed."""

    @abstractmethod
    def sweep_link(self, spec: SweepSlice, index: int, delay_ms: float) -> Link:
        """The link of a delay sweep's point `index`: `delay_ms` added each way."""

    def turn(self, spec: LinkSlice) -> contextlib.AbstractContextManager[None]:
        """One job drives the pair at a time (`infra.turns.turn`): this run's lock, and
        host B's where B is another machine."""
        return turns.turn(spec["pair"], None)

    @abstractmethod
    def doctor_lines(self, config: Config, pair: str, spec: Pair) -> list[Line]:
        """The doctor's checks of the pair's hosts and links (its toolchain is the
        backends', checked after these where host B was reached)."""

    @abstractmethod
    def host_text(self, pair: str, side: str, host: HostSlice,
                  emulations: set[str]) -> str:
        """Where one host of the pair is, for the report's run block; `emulations` are
        what its link results recorded (netns-veth, loopback, ...)."""


def placed(host: HostSlice) -> list[str]:
    """The SLURM node, or the node feature that picks it, where the config names one."""
    where = [f"node {host['node']}"] if host.get("node") else []
    return where + ([f"a node with feature {host['feature']}"] if host.get("feature") else [])
