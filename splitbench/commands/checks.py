"""`checks`: print the run's checks; fail the run when a pair, link or block failed
(after everything else is measured and reported)."""

from __future__ import annotations

import argparse
import sys

from splitbench.contracts import results
from splitbench.health import checks

HELP = "print the run's checks; fail when a link or a block failed"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default=results.ROOT)
    p.add_argument("--out", required=True, help="where to write them (on success)")


def run(args: argparse.Namespace) -> int:
    failed = checks.run_checks(args.results, args.out)
    if failed:
        print(f"splitbench: {len(failed)} pair(s), link(s) or block(s) failed (above); "
              "everything else is measured and reported. To try again, --forcerun what "
              f"failed: a pair's toolchain ({results.TOOLCHAIN.format(pair='<pair>')}), a "
              f"link's result ({results.link('<pair>', '<link>')}), the launch records "
              f"of its blocks ({results.launch('<pair>', '<link>', '<model>')}) and "
              "their cells (python -m splitbench cells --match pair=<pair>,link=<link>).",
              file=sys.stderr)
        return 1
    return 0
