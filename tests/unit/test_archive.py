"""Re-measuring a cell archives the previous files; the remeasured table compares them."""

from __future__ import annotations

import pandas as pd

from splitbench.contracts import results
from splitbench.infra import archive
from splitbench.report import table_files
from splitbench.summary import cell_summary


def _cell_files(root, decode_ms: float) -> list[str]:
    folder = root / "results/cells/p/l/m"
    folder.mkdir(parents=True, exist_ok=True)
    requests = pd.DataFrame([{
        "request_id": 0, "status": "ok", "cell_status": "ok", "decode_ms_per_token": decode_ms,
        "decode_ms_se": 0.01,
        "prefill_tps": 1000.0, "cell_wall_ms": 50.0, "launch_id": "x",
        "link_fingerprint": "f", "temp_before_c": None, "temp_after_c": None,
        "t_send_ns": 1, "t_last_ns": 2}])
    paths = [str(folder / "ctxshort_c1.parquet"), str(folder / "ctxshort_c1.requests.parquet")]
    requests.to_parquet(paths[1])
    requests.to_parquet(paths[0])
    return paths


def test_the_first_measurement_has_nothing_to_archive(tmp_path):
    paths = _cell_files(tmp_path, 1.0)
    assert archive.supersede(paths) == []
    archive.keep(paths)
    assert results.kept(paths[1]).samefile(paths[1])  # a hard link, not a copy


def test_a_remeasured_cell_keeps_the_old_files(tmp_path):
    paths = _cell_files(tmp_path, 1.0)
    archive.keep(paths)
    for path in paths:  # what Snakemake does before re-running the job
        (tmp_path / path).unlink()
    moved = archive.supersede(paths, when="20261130T000000Z")
    assert [str(p.relative_to(tmp_path / "results")) for p in moved] == [
        "archive/20261130T000000Z/cells/p/l/m/ctxshort_c1.parquet",
        "archive/20261130T000000Z/cells/p/l/m/ctxshort_c1.requests.parquet"]
    assert pd.read_parquet(moved[1])["decode_ms_per_token"].tolist() == [1.0]
    new = _cell_files(tmp_path, 1.5)
    archive.keep(new)
    summary = cell_summary.summarize([new[1]], {"short": 128})
    table = table_files.remeasured(results.archived_requests(tmp_path / "results"), summary)
    assert len(table) == 1
    row = table.iloc[0]
    assert row["archived"] == "20261130T000000Z"
    assert row["decode before (ms/token)"] == 1.0
    assert row["decode now (ms/token)"] == 1.5
    assert row["decode Δ (ms/token)"] == 0.5


def test_measurements_from_before_the_archive_are_kept_at_start(tmp_path):
    paths = _cell_files(tmp_path, 1.0)  # written by an older version: no kept links
    assert archive.keep_existing(tmp_path / "results") == 2
    assert archive.keep_existing(tmp_path / "results") == 0
    for path in paths:
        (tmp_path / path).unlink()
    assert len(archive.supersede(paths)) == 2


def test_two_archives_in_the_same_second_are_both_kept(tmp_path):
    when = "20261130T000000Z"
    for decode_ms in (1.0, 2.0):
        paths = _cell_files(tmp_path, decode_ms)
        archive.keep(paths)
        for path in paths:
            (tmp_path / path).unlink()
        archive.supersede(paths, when=when)
    kept = results.archived_requests(tmp_path / "results")
    assert [results.archived_when(p) for p in kept] == [when, f"{when}-002"]
    assert [pd.read_parquet(p)["decode_ms_per_token"].tolist() for p in kept] == [[1.0], [2.0]]
