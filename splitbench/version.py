"""Which code this is: the package's version and the git commit it runs from, for the
provenance every Parquet file and the report carry."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from splitbench import __version__

# What a run executes: a change here, not yet committed, is said with the commit.
CODE_PATHS = ("splitbench", "rules", "Snakefile", "envs", "profiles")


@functools.cache
def commit() -> str:
    """The commit of the git work tree this package runs from (12 hex digits), with
    "+changes" where its code differs from that commit; "unknown" where the package is
    not in a git work tree (a copy installed elsewhere) or git cannot tell."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = _git(root, "rev-parse", "HEAD")
        if head.returncode != 0:
            return "unknown"
        changed = _git(root, "status", "--porcelain", "--untracked-files=no", "--",
                       *CODE_PATHS)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return head.stdout.strip()[:12] + ("+changes" if changed.stdout.strip() else "")


def described() -> str:
    """"0.1.0 (commit 5ebb78c1a2b3)": the version and the commit together."""
    return f"{__version__} (commit {commit()})"


def _git(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True,
                          timeout=10)
