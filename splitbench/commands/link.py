"""`link`: set up one link (or adopt it) and verify it; a link that fails verification is
a result (its row says why), not a crash of the workflow."""

from __future__ import annotations

import argparse

from splitbench import pairs
from splitbench.contracts.slice_check import typed
from splitbench.contracts.slices import LinkCheckSettings, LinkSlice
from splitbench.links import verify

HELP = "set up and verify one link"
MEASURING = True


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spec", type=typed(LinkSlice), required=True)
    p.add_argument("--settings", type=typed(LinkCheckSettings), required=True)
    p.add_argument("--out", required=True)


def run(args: argparse.Namespace) -> None:
    # One job drives a pair at a time: iperf3 next to a running cell would skew it.
    with pairs.turn(args.spec):
        try:
            row = verify.verify(args.spec, args.settings, args.out).iloc[0]
        except verify.VERIFICATION_FAILURES as exc:
            # A result, not a crash of the workflow: the link's blocks report it, the
            # tables show it and the run's checks fail on it, after the report.
            verify.write_failure(args.spec, args.settings, exc, args.out)
            print(f"link {args.spec['pair']}/{args.spec['link']} FAILED verification: "
                  f"{exc}")
            return
    print(f"link {row['pair']}/{row['link']}: A->B {row['a_to_b_gbps']:.2f} Gbit/s, "
          f"B->A {row['b_to_a_gbps']:.2f}, bidir {row['bidir_gbps']:.2f}, "
          f"ping {row['ping_ms']:.3f} ms, RR16k p50 {row['rr16k_p50_us']:.0f} us")
