"""splitbench's commands: what a person runs, and what the workflow's rules run.

`python -m splitbench <command> ...`; `--help` lists a person's commands (doctor,
whatif, compare, cells, teardown, packet-helper) and names the rules' apart.

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
    top = argparse.ArgumentParser(
        prog="splitbench", description="What the link between two machines costs a model "
        "split across them. The workflow runs it all: snakemake --cores 1 all.",
        epilog="Run by the workflow's rules (each has --help): "
        + ", ".join(commands.BY_A_RULE) + ".")
    top.add_argument("--version", action="version",
                     version=f"splitbench {version.described()}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND",
                             title="commands")
    for name in names:
        command = commands.load(name)
        # A rule's command has no line in the list (argparse lists only those given a
        # help), so that a person sees theirs; the epilog names the rest.
        listed = {"help": command.HELP} if name in commands.BY_A_PERSON else {}
        command.arguments(sub.add_parser(name, description=command.HELP, **listed))
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
