"""Which code this is: the package's version, read from git tags, and the git commit it
runs from, for the provenance every Parquet file and the report carry and for
`python -m splitbench --version`.

A release is a tag `v<major>.<minor>.<patch>`. On a tagged commit the version is the
tag's; N commits after it, the next patch's development release, `<next>.devN+g<hash>`,
which is how setuptools-scm names the same commit when pip installs the package (the
installed metadata is the answer where the package is not in a git work tree).
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import subprocess
from pathlib import Path

# What a run executes: a change here, not yet committed, is said with the commit.
CODE_PATHS = ("splitbench", "rules", "Snakefile", "envs", "profiles")
ROOT = Path(__file__).resolve().parent.parent
# `git describe --long` of a release tag: v0.1.0-3-gabc1234
DESCRIBED = re.compile(r"^v(\d+)\.(\d+)\.(\d+)-(\d+)-g([0-9a-f]+)$")


@functools.cache
def number(root: Path = ROOT) -> str:
    """The version: from the newest release tag reachable from the work tree's commit;
    the installed package's where there is no work tree or no tag; "0+unknown" where
    neither says."""
    try:
        described = _git(root, "describe", "--tags", "--long", "--match", "v[0-9]*")
    except (OSError, subprocess.TimeoutExpired):
        described = None
    if described is not None and described.returncode == 0:
        found = from_describe(described.stdout.strip())
        if found:
            return found
    try:
        return importlib.metadata.version("splitbench")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def from_describe(text: str) -> str | None:
    """PEP 440 version of `git describe --long` output (None for a tag that is not a
    release's): the tag's own on the tag, else the next patch's N-th development
    release with the commit as its local part."""
    match = DESCRIBED.match(text)
    if not match:
        return None
    major, minor, patch, distance, short = match.groups()
    if distance == "0":
        return f"{int(major)}.{int(minor)}.{int(patch)}"
    return f"{int(major)}.{int(minor)}.{int(patch) + 1}.dev{distance}+g{short}"


@functools.cache
def commit() -> str:
    """The commit of the git work tree this package runs from (12 hex digits), with
    "+changes" where its code differs from that commit; "unknown" where the package is
    not in a git work tree (a copy installed elsewhere) or git cannot tell."""
    try:
        head = _git(ROOT, "rev-parse", "HEAD")
        if head.returncode != 0:
            return "unknown"
        changed = _git(ROOT, "status", "--porcelain", "--untracked-files=no", "--",
                       *CODE_PATHS)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return head.stdout.strip()[:12] + ("+changes" if changed.stdout.strip() else "")


def described() -> str:
    """"0.1.0 (commit 5ebb78c1a2b3)": the version and the commit together."""
    return f"{number()} (commit {commit()})"


def _git(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True,
                          timeout=10)
