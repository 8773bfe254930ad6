"""A paired cell's figures: the cell alternated round by round with the baseline link
(cells.measure, `cell.paired`), each round's difference taken between requests measured
seconds apart on the same machine; the median over rounds and its standard error, from
the median's distribution-free interval: a round whose request stalled (a 4x decode
pace on one side, no other process running) moves it by one rank, where it widened an
sd-based error to several times the link's cost."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from splitbench.contracts import results
from splitbench.infra import intervals

KEYS = results.CELL_KEYS


# A paired cell's figures (paired_deltas), as the summary carries them.
PAIRED_COLUMNS = ["paired_decode_delta_ms", "paired_decode_delta_se",
                  "paired_prefill_change_pct", "paired_prefill_change_se",
                  "paired_reference_decode_ms", "paired_reference_prefill_tps",
                  "paired_rr64_delta_us", "paired_rr64_delta_se", "paired_turn_wait_delta_us",
                  "paired_turn_wait_delta_se", "paired_a_time_delta_us",
                  "paired_a_time_delta_se", "paired_rounds"]


def _median_and_se(rounds: Any) -> tuple[pd.Series, pd.Series]:
    """Per cell, the median of its rounds' values and that median's standard error
    (`intervals.median_se`; none from fewer than two rounds: a figure older
    files or no packet socket lack)."""
    return rounds.median(), intervals.group_median_se(rounds)


def a_time_ms(requests: pd.DataFrame) -> pd.Series:
    """Host A's own time per decoded token (ms): the step less what its turns waited for
    B's answers (`rpc_turns_per_token` x `rpc_turn_wait_us`), i.e. A's own work and the
    sending and receiving of its messages. A link changes the waits; where this changes
    too, something on host A does, which a latency prediction does not hold."""
    return (pd.to_numeric(requests["decode_ms_per_token"], errors="coerce")
            - requests["rpc_turns_per_token"] * requests["rpc_turn_wait_us"] / 1000)


def paired_deltas(requests: pd.DataFrame) -> pd.DataFrame:
    """Per paired cell (index: KEYS): the median over its rounds of the round's decode
    difference (link - baseline, ms/token) and relative prefill change (%), their
    standard errors, the baseline's median decode and prefill measured alongside, and
    the number of rounds with both sides ok."""
    columns = PAIRED_COLUMNS
    if "reference" not in requests or not requests["reference"].fillna(False).any():
        return pd.DataFrame(columns=columns, index=pd.MultiIndex.from_tuples([], names=KEYS))
    ok = requests[requests["status"] == "ok"].assign(
        reference=lambda f: f["reference"].fillna(False).astype(bool))
    paired_cells = ok[ok["reference"]].groupby(KEYS).size().index
    ok = ok.set_index(KEYS).loc[lambda f: f.index.isin(paired_cells)].reset_index()
    # Older files lack them: no latency (or time of host A's own) then.
    latencies = ["rr64_us", "rpc_turn_wait_us", "rpc_turns_per_token"]
    ok = ok.assign(**{c: pd.to_numeric(ok[c], errors="coerce") if c in ok else np.nan
                      for c in latencies})
    ok["a_time_ms"] = a_time_ms(ok)
    figures = ["decode_ms_per_token", "prefill_tps", *latencies, "a_time_ms"]
    by_round = ok.groupby([*KEYS, "repeat", "round", "reference"])[figures].median().unstack(
        "reference")
    # Both sides of every figure, also where one side never had an ok request (a
    # reference that failed to launch, a link that failed in round 0): no round then.
    by_round = by_round.reindex(columns=pd.MultiIndex.from_product(
        [figures, [False, True]])).dropna(
        subset=[(f, side) for f in ("decode_ms_per_token", "prefill_tps")
                for side in (False, True)])
    rounds = pd.DataFrame({
        "decode": by_round[("decode_ms_per_token", False)]
        - by_round[("decode_ms_per_token", True)],
        "prefill": (by_round[("prefill_tps", False)] / by_round[("prefill_tps", True)] - 1)
        * 100,
        "ref_decode": by_round[("decode_ms_per_token", True)],
        "ref_prefill": by_round[("prefill_tps", True)],
        "rr64": by_round[("rr64_us", False)] - by_round[("rr64_us", True)],
        "turn_wait": by_round[("rpc_turn_wait_us", False)]
        - by_round[("rpc_turn_wait_us", True)],
        "a_time": 1000 * (by_round[("a_time_ms", False)] - by_round[("a_time_ms", True)]),
    }).groupby(level=KEYS)
    n = rounds["decode"].count()
    decode, decode_se = _median_and_se(rounds["decode"])
    prefill, prefill_se = _median_and_se(rounds["prefill"])
    rr64, rr64_se = _median_and_se(rounds["rr64"])
    wait, wait_se = _median_and_se(rounds["turn_wait"])
    a_time, a_time_se = _median_and_se(rounds["a_time"])
    out = pd.DataFrame({
        "paired_decode_delta_ms": decode,
        "paired_decode_delta_se": decode_se,
        "paired_prefill_change_pct": prefill,
        "paired_prefill_change_se": prefill_se,
        "paired_reference_decode_ms": rounds["ref_decode"].median(),
        "paired_reference_prefill_tps": rounds["ref_prefill"].median(),
        "paired_rr64_delta_us": rr64,
        "paired_rr64_delta_se": rr64_se,
        "paired_turn_wait_delta_us": wait,
        "paired_turn_wait_delta_se": wait_se,
        "paired_a_time_delta_us": a_time,
        "paired_a_time_delta_se": a_time_se,
        "paired_rounds": n,
    })
    return out.reindex(columns=columns)


