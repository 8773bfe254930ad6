"""`teardown`: stop every process and namespace this run started, and nothing else;
with --purge, also remove what runs keep between them (host B's tensor cache)."""

from __future__ import annotations

import argparse

from splitbench.infra import teardown

HELP = "stop every process and namespace this run started"


def arguments(p: argparse.ArgumentParser) -> None:
    """What to stop is what the run recorded."""
    p.add_argument("--purge", action="store_true",
                   help="also remove what runs keep between them: each host B's tensor "
                        "cache (the weights its workers were sent)")


def run(args: argparse.Namespace) -> None:
    for line in teardown.teardown():
        print(line)
    if args.purge:
        # Only here: the backends' packages load their HTTP clients, which a plain
        # teardown (run at every exit) need not pay for.
        from splitbench import backends
        from splitbench.contracts import registry

        for name in registry.names():
            for line in backends.get(name).purge():
                print(line)
