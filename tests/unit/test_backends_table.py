"""The backends table: one model shape split three ways, side by side, each model's
decode verdict said once under the table, not on every row."""

from __future__ import annotations

import pandas as pd

from splitbench.findings import splits as split_findings
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


def decode(frame: pd.DataFrame, ms: dict[str, float], se: float = 0.01) -> pd.DataFrame:
    """The summary with each split's decode at `ms[split]` on every cell."""
    return frame.assign(decode_ms_per_token=frame["split"].map(ms), decode_ms_se=se)


def test_the_findings_open_with_the_fastest_split_and_what_each_moves_and_pays():
    """The backends example's table showed RPC at 0.51 against TP=2's 10.40 and PP=2's
    8.38 with no sentence saying so."""
    from splitbench.compare import comparison

    cells = decode(summary(), {"rpc": 0.51, "tp2": 10.40, "pp2": 8.38})
    cells.loc[cells["link"] == "narrow", "decode_ms_per_token"] += cells["split"].map(
        {"rpc": 0.5, "tp2": 3.0, "pp2": 1.0})
    comp = comparison.compare_links(cells, "plain")
    found = split_findings.findings(cells, comp, ["short", "mid"], "plain")
    assert [f.section for f in found] == ["Backends: the shape 2x128 h4/2 v1024"] * 2
    short = found[0].markdown()
    assert short.startswith("**At short on plain, llama.cpp RPC decodes fastest**: "
                            "llama.cpp RPC 0.51 ±0.02, vLLM PP=2 8.38 ±0.02 and vLLM TP=2 "
                            "10.40 ±0.02 ms/token."), short
    assert "Per decoded token across the link: llama.cpp RPC 2,064 A→B and 4,104 B→A" \
        in short
    assert "on narrow llama.cpp RPC +0.50" in short and "vLLM TP=2 +3.00" in short
    assert "none resolvable" not in short
    # Within the ±: none is said to be faster.
    close = decode(summary(), {"rpc": 1.00, "tp2": 1.01, "pp2": 1.50}, se=0.05)
    text = split_findings.findings(close, comparison.compare_links(close, "plain"), ["short"],
                           "plain")[0].markdown()
    assert text.startswith("**At short on plain, no split decodes faster than the next "
                           "beyond its ±**"), text
    # The narrow link costs each split as much as the plain one, within every ±: said.
    assert "on narrow" in text and "(none resolvable: each lies inside its ±)" in text, text
    # One split alone: no such finding.
    alone = summary().query("split == 'rpc'")
    assert split_findings.findings(alone, comp, ["short"], "plain") == []
