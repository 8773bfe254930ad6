"""Kinds of pair, one module each behind `PairKind` (base.py): `embedded` (both hosts on
this machine, links emulated) and `ssh` (host B another machine, links real). A pair's
`mode:` names its kind; everything that differs between them is asked of the kind here.
"""

from __future__ import annotations

import contextlib

from splitbench.contracts.slices import LinkSlice, SweepSlice
from splitbench.links.link import Link
from splitbench.pairs.base import PairKind
from splitbench.pairs.embedded import Embedded
from splitbench.pairs.ssh import OverSsh

EMBEDDED = Embedded()
KINDS: dict[str, PairKind] = {kind.name: kind for kind in (EMBEDDED, OverSsh())}


def of(mode: str) -> PairKind:
    """The kind a pair's `mode:` names (the config's schema admits only these)."""
    return KINDS[mode]


def ensure_link(spec: LinkSlice) -> Link:
    """The ready link of a link slice, set up by its pair's kind."""
    return of(spec["mode"]).ensure_link(spec)


def turn(spec: LinkSlice) -> contextlib.AbstractContextManager[None]:
    """The job's turn on the link slice's pair (`PairKind.turn`)."""
    return of(spec["mode"]).turn(spec)


def of_sweep(spec: SweepSlice) -> PairKind:
    """The kind of a delay sweep's pair: a sweep on a baseline link names that link."""
    return of(spec["link"]["mode"]) if "link" in spec else EMBEDDED


def in_results(mode: str | None, emulations: set[str]) -> PairKind | None:
    """The kind of a pair as its results say: their `mode`, or, in results written
    before it was recorded, the lab's emulations; None where neither tells."""
    if mode in KINDS:
        return KINDS[mode]
    return EMBEDDED if mode is None and emulations & {"netns-veth", "loopback"} else None
