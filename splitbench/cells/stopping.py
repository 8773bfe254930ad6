"""When a cell sends more: its floor, its ceiling, and its precision targets between
them (`cell.precision`; the rule's statistics are infra/precision.py's).

A single-stream cell sends requests one after another: at least
`single_stream_requests` (a median and a spread for its prefill, TTFT and decode), then
more while it has run under `single_stream_seconds`. A concurrent cell releases its N
requests together, one release after another: at least `concurrent_releases` times (a
median and a spread for its overlap, throughput and decode), then again while it has
run under `concurrent_seconds`. Either way cheap short requests buy a tighter spread; an
expensive long release is not repeated beyond the minimum. With targets, a cell also
stops at the first checkpoint past its minimum where its figures are known to them; a
paired cell's rounds stop the same way on its decode difference. (The cell stops after
a release with a failed request, whatever this says.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from splitbench.backends import metrics
from splitbench.contracts.slices import CellSlice
from splitbench.infra import precision

# The rule reads each figure's spread at its upper confidence bound (infra/precision.py).
STOPPING = "stopping"


def more_shots(cell: CellSlice, sent: int, elapsed_s: float,
               known: Callable[[], bool] = lambda: False) -> bool:
    """Whether to release the cell's requests once more: `sent` releases so far,
    `elapsed_s` since the first, `known()` whether its figures reached their targets
    (asked only past the floor and under the ceiling)."""
    if cell["concurrency"] != 1:
        least = cell.get("concurrent_releases", 1)
        seconds = cell.get("concurrent_seconds", 0.0)
    else:
        least = cell.get("single_stream_requests", 1)
        seconds = cell.get("single_stream_seconds", 0.0)
    if sent < least:
        return True
    return elapsed_s < seconds and not known()


def targets(cell: CellSlice) -> dict[str, float]:
    """The targets this kind of cell reads (its slice holds only those, plan.precision_for)."""
    kinds = (precision.SINGLE_STREAM_TARGETS if cell["concurrency"] == 1
             else precision.CONCURRENT_TARGETS)
    return precision.targets_for(cell.get("precision"), kinds)


def looks(cell: CellSlice, sent: int) -> bool:
    """Whether the rule looks at the cell after `sent` requests or releases."""
    first = (precision.FIRST_LOOK if cell["concurrency"] == 1
             else precision.FIRST_LOOK_RELEASES)
    return bool(targets(cell)) and precision.is_checkpoint(sent, first)


def known(cell: CellSlice, releases: Sequence[Sequence[metrics.RequestRow]]) -> bool:
    """Whether the figures of `releases` (each release's request rows) reached the
    cell's targets: a single stream's decode and prefill over its requests, a
    concurrent cell's decode and throughput over its releases. A failed request: not."""
    if any(row["status"] != "ok" for rows in releases for row in rows):
        return False
    if cell["concurrency"] == 1:
        rows = [row for rows in releases for row in rows]
        achieved = {
            "decode_rel": precision.relative_unc([r["decode_ms_per_token"] for r in rows],
                                                 [r["decode_ms_se"] for r in rows],
                                                 spread=STOPPING),
            "prefill_rel": precision.relative_unc([r["prefill_tps"] for r in rows],
                                                  spread=STOPPING)}
    else:
        achieved = {
            # No per-token floor: a concurrent request's gaps hold the other slots'
            # prompts (cell_summary._uncertainty).
            "decode_rel": precision.relative_unc(
                [_median(rows, "decode_ms_per_token") for rows in releases],
                spread=STOPPING),
            "throughput_rel": precision.relative_unc(
                [metrics.throughput_tps(list(rows)) for rows in releases],
                spread=STOPPING)}
    return precision.reached(achieved, targets(cell))


def looks_paired(cell: CellSlice, rounds: int) -> bool:
    """Whether the rule looks at a paired cell after `rounds` whole rounds."""
    wanted = precision.targets_for(cell.get("precision"), precision.PAIRED_TARGETS)
    return bool(wanted) and precision.is_checkpoint(rounds, precision.FIRST_LOOK_PAIRED)


def paired_known(cell: CellSlice, decode: Mapping[tuple[int, bool], Sequence[float]]
                 ) -> bool:
    """Whether a paired cell's decode difference (its link less the baseline, the
    median over rounds of each round's medians) is known to its target; `decode`: the
    ok requests' decode ms/token by (round, reference)."""
    rounds = sorted({r for r, _ in decode})
    deltas = [float(np.median(decode[(r, False)]) - np.median(decode[(r, True)]))
              for r in rounds if (r, False) in decode and (r, True) in decode]
    return precision.reached({"paired_decode_ms": precision.stopping_unc(deltas)},
                             precision.targets_for(cell.get("precision"),
                                                   precision.PAIRED_TARGETS))


def _median(rows: Sequence[metrics.RequestRow], column: str) -> float | None:
    values = [r[column] for r in rows if r[column] is not None]
    return float(np.median(values)) if values else None
