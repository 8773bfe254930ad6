"""splitbench's commands: what the workflow's rules run, and what a person runs.

`python -m splitbench <command> ...`; a person runs `cells`, `teardown`, `whatif` and
`doctor`, the rules the others.

Each command is a module of `splitbench.commands`, named as the command; this module
only finds the one asked for. Only that command's module is imported, so a quick command
(`teardown`, `cells`) does not pay for the chart libraries.
"""

from __future__ import annotations

import argparse
import os
import sys

from splitbench import commands, version
from splitbench.errors import SplitbenchError
from splitbench.infra import procs
from splitbench.infra.stamps import stamped


def parser(names: list[str]) -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="splitbench", description=__doc__.splitlines()[0])
    top.add_argument("--version", action="version",
                     version=f"splitbench {version.described()}")
    sub = top.add_subparsers(dest="command", required=True)
    for name in names:
        command = commands.load(name)
        command.arguments(sub.add_parser(name, help=command.HELP))
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    asked = argv[0] if argv and argv[0] in commands.NAMES else None
    # --version alone needs no command: none is imported for it.
    wanted = [asked] if asked else [] if argv == ["--version"] else list(commands.NAMES)
    args = parser(wanted).parse_args(argv)
    command = commands.load(args.command)
    try:
        if getattr(command, "MEASURING", False):
            with procs.job(args.command), stamped(args.command):
                code = command.run(args) or 0
        else:
            code = command.run(args) or 0
        sys.stdout.flush()  # here, not at exit: a reader that left is met in the try
        return code
    except SplitbenchError as error:
        # A problem the message names (a config key, a host, a file): said, not a trace.
        print(f"error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader left early (`cells | head -1`): no trace, and nothing more to write.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a shell reports for a program ended by SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
