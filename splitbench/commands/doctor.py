"""`doctor`: check every pair of a config before anything starts (SSH, tools, addresses,
ports, memory), each problem with its fix."""

from __future__ import annotations

import argparse

from splitbench import backends, configuration
from splitbench.matrix import plan
from splitbench.workflow import doctor

HELP = "check every pair of a config before anything starts"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--configfile", default="config/config.yaml",
                   help="the config to check (default config/config.yaml)")
    p.add_argument("--results", default="results", help="the results directory")


def run(args: argparse.Namespace) -> int:
    written = plan.read_yaml(args.configfile)
    plan.names_as_text(written)
    try:
        config = configuration.parsed(written)
        backends.check_models(config)
    except (configuration.ConfigError, ValueError) as exc:
        print(f"{doctor.BAD} config {args.configfile}: {exc}")
        return 1
    lines = doctor.check(config, args.results)
    for line in lines:
        print(line, flush=True)
    bad = sum(line.mark == doctor.BAD for line in lines)
    print(f"splitbench doctor: {bad} problem(s)" if bad else "splitbench doctor: ready")
    return 1 if bad else 0
