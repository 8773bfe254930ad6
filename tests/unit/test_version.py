"""The code's commit: in every Parquet file's provenance and on the report."""

from __future__ import annotations

import subprocess

import pandas as pd

from splitbench import version
from splitbench.infra import parquet_io
from tests.conftest import ROOT


def test_every_parquet_file_names_the_commit_of_the_code_that_wrote_it(tmp_path):
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert version.commit().removesuffix("+changes") == head[:12]
    assert version.described() == f"0.1.0 (commit {version.commit()})"
    parquet_io.write(pd.DataFrame({"x": [1]}), tmp_path / "x.parquet", {"stage": "test"})
    written = parquet_io.provenance(tmp_path / "x.parquet")
    assert written["code_commit"] == version.commit() and written["stage"] == "test"
