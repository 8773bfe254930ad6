"""When a cell's figures are known well enough for it to stop (`cell.precision`).

A cell sends at least its floor (requests, releases or rounds), at most its ceiling
(its seconds, or its rounds), and in between stops at the first checkpoint where every
figure with a target is known within it. The ± is the one the report prints for that
figure (infra/intervals.py: from 6 samples the median's distribution-free interval,
below Student's t times MEDIAN_SE x sd / sqrt(n)), with decode's per-token dispersion as
a floor.

Stopping when a ± first looks small would favour the samples whose spread came out
small by chance, and report a ± smaller than the truth. Three things keep that in check
(docs/method.md): the rule looks only at fixed checkpoints, the first look's count
doubled again and again (FIRST_LOOK, 2 x, 4 x ...: at most four or five looks in a
cell); the first look comes only once the spread rests on enough samples (10 requests,
6 releases, 10 rounds); and the rule reads the spread's upper confidence bound, not the
spread itself (`stopping_unc`), so that a handful of samples that agree by chance do not
stop a cell whose figures vary more.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from splitbench.infra import intervals

# The first look of the rule, in requests of a single stream and rounds of a paired cell,
# and in releases of a concurrent cell (its sample unit: the requests of one release are
# not interchangeable, the first decodes while the next one's prompt is processed). A
# spread from fewer is itself too uncertain to stop on: at 5 samples its 95% upper bound
# is 2.9 times it, at 10 1.6 times (chi-square).
FIRST_LOOK = 10
FIRST_LOOK_RELEASES = 6
# A paired cell's rounds are not independent draws: the two launches' speeds wander over
# seconds, so neighbouring rounds agree more than distant ones and 5 rounds' spread
# understates their ±. Measured on a 2-core machine: a 5gbe cell stopped at 5 rounds with
# +0.04 ±0.02 ms/token where 20 rounds read +0.062 and +0.068 in two other runs (the
# report flagged it against its prediction); over 14 series of 20 rounds (five runs) the
# ± after 5 rounds was 0.03-0.14 ms/token (median 0.07) against a target of 0.03, so a
# stop there picks the rare run whose spread came out at half its size.
FIRST_LOOK_PAIRED = 10

# Why a cell stopped, on each of its rows (`stopped`).
Stopped = Literal["target", "ceiling", "failure"]
TARGET: Stopped = "target"
CEILING: Stopped = "ceiling"
FAILURE: Stopped = "failure"

# The targets, by the kind of cell that reads them (`cell.precision`).
SINGLE_STREAM_TARGETS = ("decode_rel", "prefill_rel")
CONCURRENT_TARGETS = ("decode_rel", "throughput_rel")
PAIRED_TARGETS = ("paired_decode_ms",)


def is_checkpoint(sent: int, first: int) -> bool:
    """Whether the rule looks after `sent` samples: at `first` x 2^k only."""
    if sent < first or sent % first:
        return False
    ratio = sent // first
    return ratio & (ratio - 1) == 0


def checkpoint_at_least(needed: float, first: int) -> int:
    """The first checkpoint at or above `needed` samples (the estimator's count)."""
    count = first
    while count < needed:
        count *= 2
    return count


def median_unc(values: Sequence[float]) -> float | None:
    """The ± of a median of `values` (intervals.median_halfwidth); None from fewer than
    two finite values."""
    unc = intervals.median_halfwidth(values)
    return None if not np.isfinite(unc) else float(unc)


def stopping_unc(values: Sequence[float]) -> float | None:
    """The ± the rule stops on: the printed one's, scaled by how much larger the
    samples' spread may really be than it came out (the 95% upper confidence bound of
    a standard deviation over the standard deviation, intervals.sd_upper: 1.65 at 10
    samples). A cell stops only where even the spread its samples may really have would
    give a ± within the target."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    printed = median_unc(finite)
    if printed is None:
        return None
    return float(printed * intervals.sd_upper(1.0, len(finite)))


def relative_unc(values: Sequence[float], floor_se: Sequence[float] = (),
                 spread: str = "printed") -> float | None:
    """The ± of the median of `values` relative to it, with the standard errors
    `floor_se` (decode's per-token dispersion, per sample) as its floor: the report's
    decode ± is never below their median over sqrt(n). `spread`: "printed" for the ± the
    report prints, "stopping" for the one the rule stops on (`stopping_unc`)."""
    unc = stopping_unc(values) if spread == "stopping" else median_unc(values)
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if unc is None or not finite:
        return None
    floors = [s for s in floor_se if s is not None and math.isfinite(s)]
    if floors:
        unc = max(unc, intervals.halfwidth(float(np.median(floors)) / math.sqrt(len(finite)),
                                           len(finite) - 1))
    middle = float(np.median(finite))
    return abs(unc / middle) if middle else None


def reached(achieved: Mapping[str, float | None], targets: Mapping[str, float | None]
            ) -> bool:
    """Whether every figure with a target (not None) has a ± within it; a figure with no
    ± yet (too few samples, a failed request) has not. No target at all: never (the
    cell runs to its ceiling)."""
    wanted = {name: target for name, target in targets.items() if target is not None}
    return bool(wanted) and all(
        achieved.get(name) is not None and achieved[name] <= target
        for name, target in wanted.items())


def targets_for(precision: Mapping[str, float | None] | None, kinds: Sequence[str]
                ) -> dict[str, float]:
    """The targets of `precision` that one kind of cell reads, those set."""
    return {k: v for k, v in (precision or {}).items() if k in kinds and v is not None}
