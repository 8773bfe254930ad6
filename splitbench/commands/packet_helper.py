"""`packet-helper`: install (as root, once) the helper that gives a user who is not root
on host A its packet socket, or take it off (infra/packet_helper.py)."""

from __future__ import annotations

import argparse
import os

from splitbench.errors import SplitbenchError
from splitbench.infra import packet_helper

HELP = "install the packet-socket helper for a user who runs splitbench without root"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", default=os.environ.get("SUDO_USER"),
                   help="the user who runs splitbench (default: the one who ran sudo)")
    p.add_argument("--remove", action="store_true", help="take every installed helper off")


def run(args: argparse.Namespace) -> None:
    if args.remove:
        gone = packet_helper.remove()
        print("\n".join(f"removed {p}" for p in gone) or "no packet helper was installed")
        return
    if not args.user:
        raise SplitbenchError("packet-helper: say whose it is (--user NAME), or run it "
                              "through sudo as that user")
    helper = packet_helper.install(args.user)
    print(f"installed {helper} (root-owned, mode 0750 for {args.user}'s group, "
          f"{packet_helper.CAPABILITIES}); take it off with: sudo "
          ".venv/bin/python -m splitbench packet-helper --remove")
