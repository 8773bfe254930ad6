"""Whether a link's decode cost is fixed per step or grows with context: the findings'
claim across contexts, from constructed link comparison rows."""

from __future__ import annotations

from splitbench.findings import collect as findings
from tests.support.comparison_rows import comp_rows


def test_a_bandwidth_dominated_cost_that_grows_with_context():
    rows = comp_rows("slow", [(0.30, 0.02), (1.50, 0.05), (6.00, 0.20)],
                     latency=(0.05, 0.01), bandwidth=(0.26, 0.02), trips=1.0, gap_us=50)
    text = findings.decode_cost(rows, "slow", "m").markdown()
    assert "It grows with context, from +0.30 at short to +6.00 at 32k" in text
    assert "bandwidth dominates" in text


def test_a_cost_that_may_grow_is_not_called_growing_short_of_three_standard_errors():
    # A fixed +0.07 with a 5k cell measured after it that read high: +0.38 ±0.30 is
    # outside its ± (resolved) and 0.31 apart, more than their combined ± (0.30) but
    # less than the 3 combined standard errors a run's many comparisons need (0.46).
    rows = comp_rows("x", [(0.07, 0.03), (0.38, 0.30), (0.26, 0.35)],
                     latency=(0.08, 0.00), bandwidth=(0.00, 0.00), trips=1.0, gap_us=75)
    text = findings.decode_cost(rows, "x", "m").markdown()
    assert "It grows with context" not in text
    assert "Whether it grows with context is not settled" in text, text
    assert ("from short to 5k it changes by +0.31 ±0.30 ms (by up to 0.61 ms, 95%), "
            "neither within 25% of its +0.07 (a fixed per-step cost) nor beyond the 3 "
            "combined standard errors") in text, text
    # Beyond them, it grows.
    grown = comp_rows("x", [(0.07, 0.03), (0.70, 0.15)], latency=(0.08, 0.00),
                      bandwidth=(0.00, 0.00), trips=1.0, gap_us=75)
    assert "It grows with context, from +0.07 at short to +0.70 at 5k" in \
        findings.decode_cost(grown, "x", "m").markdown()


def test_a_cost_whose_longer_context_reads_lower_is_not_called_growing():
    """A default run's 5gbe: +0.06 ±0.03 at short, +0.55 ±0.27 at 5k (resolved, beyond 3
    combined standard errors of short) and +0.03 ±0.26 at 8k (not resolved): the longer cell
    contradicts growth with context, so the finding does not claim it."""
    rows = comp_rows("x", [(0.06, 0.03), (0.55, 0.27), (0.03, 0.26)],
                     latency=(0.08, 0.00), bandwidth=(0.00, 0.00), trips=1.0, gap_us=75)
    text = findings.decode_cost(rows, "x", "m").markdown()
    assert "It grows with context" not in text, text
    assert ("Whether it grows with context is not settled: +0.55 ±0.27 at 5k is above "
            "what the longer 32k reads (+0.03 ±0.26) beyond their ±.") in text, text
    # A longer context that reads as high or higher leaves the growth standing.
    higher = comp_rows("x", [(0.06, 0.03), (0.55, 0.27), (0.60, 0.26)],
                       latency=(0.08, 0.00), bandwidth=(0.00, 0.00), trips=1.0, gap_us=75)
    assert "It grows with context" in findings.decode_cost(higher, "x", "m").markdown()
