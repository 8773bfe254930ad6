"""The backends table: one model shape split three ways, side by side, each model's
decode verdict said once under the table, not on every row."""

from __future__ import annotations

import pandas as pd

from splitbench.infra import tables_io
from splitbench.report import side_by_side

VERDICT = ("not resolvable on this data: the slope lies inside its ± (not resolvable "
           "from zero)")


def summary() -> pd.DataFrame:
    rows = []
    for model, split in (("rpc", "rpc"), ("tp", "tp2"), ("pp", "pp2")):
        for link in ("plain", "narrow"):
            for ctx, conc in (("short", 1), ("mid", 1), ("short", 2)):
                rows.append({"pair": "lab", "link": link, "model": model, "ctx": ctx,
                             "conc": conc, "status": "ok", "split": split,
                             "backend": "llamacpp" if split == "rpc" else "vllm",
                             "model_shape": "2x128 h4/2 v1024", "flags": None,
                             "decode_ms_per_token": 1.0, "decode_ms_se": 0.01,
                             "prefill_tps": 100.0, "prefill_tps_se": 1.0, "ttft_ms": 5.0,
                             "ttft_ms_se": 0.1, "overlap": 0.5 if conc > 1 else None,
                             "rpc_bytes_per_token_a_to_b": 2064.0,
                             "rpc_bytes_per_token_b_to_a": 4104.0})
    return pd.DataFrame(rows)


def mechanisms(verdicts: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame([{"model": m, "mechanism": "decode", "verdict": v}
                         for m, v in verdicts.items()])


def test_the_verdict_is_said_once_below_the_table(tmp_path):
    same = mechanisms({m: VERDICT + "; plain: +0.01 ms/token" for m in ("rpc", "tp", "pp")})
    table = side_by_side.backends_table(summary(), ["short", "mid"], "plain", same)
    assert len(table) == 18
    assert not any(VERDICT in str(v) for v in table.to_numpy().ravel())
    assert table.attrs["note"] == ("\nDecode verdict of each model (mechanisms table):\n\n"
                                   f"- rpc, tp, pp: {VERDICT}\n")
    tables_io.write_table(table, tmp_path / "backends", "Backends")
    markdown = (tmp_path / "backends.md").read_text()
    assert markdown.count(VERDICT) == 1
    assert VERDICT not in (tmp_path / "backends.csv").read_text()


def test_different_verdicts_are_each_said_once():
    rpc = "decode pays ~1.0 ±0.2 round trips of link latency per token"
    table = side_by_side.backends_table(summary(), ["short", "mid"], "plain",
                                  mechanisms({"rpc": rpc, "tp": VERDICT, "pp": VERDICT}))
    note = table.attrs["note"]
    assert f"- rpc: {rpc}\n" in note and f"- tp, pp: {VERDICT}\n" in note
    assert note.count(VERDICT) == 1
