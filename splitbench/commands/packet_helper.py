"""`packet-helper`: the commands root runs (once) to install the helper that gives a user
who is not root on host A its packet socket; run as root, it runs them; `--remove` takes
it off (infra/packet_helper.py)."""

from __future__ import annotations

import argparse
import getpass
import os

from splitbench.infra import packet_helper

HELP = ("print (as root: run) what installs the packet-socket helper for a user who runs "
        "splitbench without root")


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", default=os.environ.get("SUDO_USER") or getpass.getuser(),
                   help="the user who runs splitbench (default: the one who ran sudo, "
                   "else this one)")
    p.add_argument("--remove", action="store_true", help="take every installed helper off")


def run(args: argparse.Namespace) -> None:
    if args.remove:
        gone = packet_helper.remove()
        print("\n".join(f"removed {p}" for p in gone) or "no packet helper was installed")
        return
    if os.geteuid() != 0:
        print(f"As root, after reading {packet_helper.SOURCE} (it is short), run:\n")
        print("\n".join(f"  {line}" for line in packet_helper.install_commands(args.user)))
        print(f"\nthen log in again as {args.user} (the group {packet_helper.GROUP} counts "
              "from a new login). It shows that user the first bytes of TCP segments on "
              f"ports {packet_helper.FIRST_PORT}-{packet_helper.LAST_PORT} of every "
              "interface, nothing else.")
        return
    helper = packet_helper.install(args.user)
    print(f"installed {helper} (root-owned, mode 0750 for the group {packet_helper.GROUP}, "
          f"with {args.user} in it; {packet_helper.CAPABILITIES}); {args.user} has it from "
          "a new login. Take it off with: sudo .venv/bin/python -m splitbench "
          "packet-helper --remove")
