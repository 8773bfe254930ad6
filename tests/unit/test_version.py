"""The code's version (from git tags) and commit: in every Parquet file's provenance,
on the report and from `python -m splitbench --version`."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd

from splitbench import version
from splitbench.infra import parquet_io
from tests.conftest import ROOT


def test_every_parquet_file_names_the_commit_of_the_code_that_wrote_it(tmp_path):
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert version.commit().removesuffix("+changes") == head[:12]
    assert version.described() == f"{version.number()} (commit {version.commit()})"
    parquet_io.write(pd.DataFrame({"x": [1]}), tmp_path / "x.parquet", {"stage": "test"})
    written = parquet_io.provenance(tmp_path / "x.parquet")
    assert written["code_commit"] == version.commit() and written["stage"] == "test"


def _git(repo, *argv):
    return subprocess.run(["git", "-C", str(repo), *argv], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_version_is_the_release_tag_and_counts_the_commits_after_it(tmp_path):
    _git(tmp_path, "init", "-q")
    for setting in (("user.email", "t@example.invalid"), ("user.name", "t")):
        _git(tmp_path, "config", *setting)
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "one")
    _git(tmp_path, "tag", "-a", "v1.4.9", "-m", "release")
    _git(tmp_path, "tag", "nightly")  # not a release's tag: never the version
    assert version.number.__wrapped__(tmp_path) == "1.4.9"
    for message in ("two", "three"):
        _git(tmp_path, "commit", "-q", "--allow-empty", "-m", message)
    short = _git(tmp_path, "rev-parse", "--short", "HEAD")
    assert version.number.__wrapped__(tmp_path) == f"1.4.10.dev2+g{short}"
    assert version.from_describe("nightly-0-gabc1234") is None


def test_version_says_the_version_and_the_commit():
    said = subprocess.run([sys.executable, "-m", "splitbench", "--version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert said.returncode == 0, said.stderr
    assert said.stdout.strip() == f"splitbench {version.described()}"
    tags = _git(ROOT, "tag", "--list", "v[0-9]*")
    if tags:  # a clone with its tags: the number is theirs, not the fallback
        assert version.number()[0].isdigit() and "unknown" not in version.number()
