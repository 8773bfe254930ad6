"""The table code gives back seed 002's published figures.

tests/unit/fixtures/seed_002_tables.md holds the seed's printed tables; seed_002_summary.csv
holds summary rows derived from them at the seed's own precision (how: the docstring of
tests/unit/fixtures/seed_002_build.py). Every expected figure below is one the seed prints.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from splitbench.compare import mechanisms
from splitbench.infra import fits
from splitbench.report import tables
from tests.support.comparison_rows import compared

FIXTURES = Path(__file__).resolve().parent / "fixtures"
_spec = importlib.util.spec_from_file_location("seed_002_build", FIXTURES / "seed_002_build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

SEED = build.read_tables()
SUMMARY = pd.read_csv(FIXTURES / "seed_002_summary.csv")
LINKS = pd.read_csv(FIXTURES / "seed_002_links.csv")
CONTEXTS = build.CONTEXTS
FAST_MOES = ["Qwen3.6-35B-A3B Q8_0", "gpt-oss-120b MXFP4"]


def marked(seed_text: str) -> str:
    """The seed's text with splitbench's failure mark (the seed prints "❌ 400")."""
    return seed_text.replace("❌", tables.FAIL_MARK)


def leading_number(text: str) -> float | None:
    match = re.match(r"[+-]?\d+(?:\.\d+)?", text)
    return float(match[0]) if match else None


def row_of(frame: pd.DataFrame, **keys: str) -> pd.Series:
    mask = np.logical_and.reduce([frame[k] == v for k, v in keys.items()])
    assert mask.sum() == 1, keys
    return frame[mask].iloc[0]


def test_fixture_is_what_the_build_writes():
    summary, links = build.build(SEED)
    pd.testing.assert_frame_equal(summary, SUMMARY, check_dtype=False, rtol=1e-8)
    pd.testing.assert_frame_equal(links, LINKS, check_dtype=False)


def test_headline_figures():
    """The issue's examples: Qwen3.6 at 100K, and GLM-4.5-Air's fake-TB5 delta."""
    decode = tables.single_stream_decode(SUMMARY, CONTEXTS)
    prefill = tables.single_stream_prefill(SUMMARY, CONTEXTS)
    qwen = {"model": "Qwen3.6-35B-A3B Q8_0", "link": "usb10g"}
    assert row_of(decode, **qwen)["100k"] == "50.8"
    assert row_of(prefill, **qwen)["100k"] == "844"
    comparison = tables.link_comparison(SUMMARY, compared(SUMMARY, baseline="5gbe"), CONTEXTS)
    glm = comparison[(comparison["model"] == "GLM-4.5-Air Q4_K_M")
                     & (comparison["link"] == "faketb5")]
    deltas = [leading_number(t) for t in glm["decode Δ (ms/token)"].iloc[:4]]
    assert min(deltas) == 1.71 and max(deltas) == 1.83


def test_single_stream_decode_and_retention():
    table = tables.single_stream_decode(SUMMARY, CONTEXTS)
    assert "100k/short" in table.columns
    for seed in SEED["decode"].to_dict("records"):
        ours = row_of(table, model=seed["model"], link="usb10g")
        for column in [*CONTEXTS, "100k/short"]:
            assert ours[column] == marked(seed[column]), (seed["model"], column)


def test_single_stream_prefill():
    table = tables.single_stream_prefill(SUMMARY, CONTEXTS)
    for seed in SEED["prefill"].to_dict("records"):
        ours = row_of(table, model=seed["model"], link="usb10g")
        for ctx in CONTEXTS:
            # The seed leaves the context wall's cells empty; splitbench names the wall.
            expected = f"{tables.FAIL_MARK} 400" if seed[ctx] == "—" else seed[ctx]
            assert ours[ctx] == expected, (seed["model"], ctx)


def test_link_comparison_prefill_change():
    table = tables.link_comparison(SUMMARY, compared(SUMMARY, baseline="5gbe"), CONTEXTS)
    for seed in SEED["prefill_change"].to_dict("records"):
        for ctx in CONTEXTS:
            ours = row_of(table, model=seed["model"], link=seed["link"], ctx=ctx)["prefill Δ"]
            expected = f"{tables.FAIL_MARK} 400" if seed[ctx] == "—" else seed[ctx]
            assert ours == expected, (seed["model"], seed["link"], ctx)


def test_link_comparison_decode_delta_and_resolution():
    """Every printed delta comes out at the printed precision with an uncertainty it
    exceeds; every "—" is either the context wall or a difference inside the
    uncertainty (the seed: "within a single quantization step")."""
    table = tables.link_comparison(SUMMARY, compared(SUMMARY, baseline="5gbe"), CONTEXTS)
    statuses = SUMMARY[SUMMARY["conc"] == 1].set_index(["model", "link", "ctx"])["status"]
    for seed in SEED["decode_delta"].to_dict("records"):
        for ctx in CONTEXTS:
            key = (seed["model"], seed["link"], ctx)
            ours = row_of(table, model=key[0], link=key[1], ctx=ctx)["decode Δ (ms/token)"]
            if seed[ctx] != "—":
                assert ours.startswith(seed[ctx] + " ±"), (key, ours)
            elif statuses[key] == "ctx_wall":
                assert ours == f"{tables.FAIL_MARK} 400", key
            else:
                assert ours.startswith("not resolvable ("), (key, ours)


def test_glm_per_token_time_on_the_baseline():
    """Conclusion 2: on 5GbE GLM-4.5-Air takes 19.7 ms/token at short, 66.7 at 52K (3.4x)
    while fake TB5's delta stays at 1.71-1.83."""
    table = tables.link_comparison(SUMMARY, compared(SUMMARY, baseline="5gbe"), CONTEXTS)
    for seed in SEED["baseline_decode_ms"].to_dict("records"):
        for ctx in ["short", "52k"]:
            ours = row_of(table, model=seed["model"], link="faketb5", ctx=ctx)
            assert round(float(ours["decode base (ms/token)"]), 1) == float(seed[ctx])


def test_ttft_against_prefill():
    table = tables.ttft_table(SUMMARY, CONTEXTS)
    for seed in SEED["ttft"].to_dict("records"):
        ours = row_of(table, model=seed["model"], link=seed["link"], ctx=seed["ctx"])
        assert ours["prompt tokens"] == seed["prompt_tokens"]
        assert round(float(ours["TTFT (ms)"]) / 1000) == int(seed["ttft_s"])
        assert round(float(ours["prompt ÷ server prefill (ms)"]) / 1000) == int(
            seed["estimate_s"])


@pytest.mark.parametrize("link", ["5gbe", "faketb5", "usb10g"])
def test_concurrency_boundary(link):
    table = tables.concurrency_boundary(SUMMARY, CONTEXTS)
    for seed in SEED["boundary"].to_dict("records"):
        ours = row_of(table, model=seed["model"], link=link)
        assert [ours[c] for c in CONTEXTS] == [marked(seed[c]) for c in CONTEXTS], (
            seed["model"])


def test_overlap():
    """The seed's 5GbE overlaps. Where it prints "—" splitbench names the failure; where
    it prints a figure for a cell its boundary table counts as failed (decode below
    1 tok/s at 4-way), splitbench prints the figure with the failure beside it."""
    table = tables.overlap_table(SUMMARY, CONTEXTS)
    for seed in SEED["overlap"].to_dict("records"):
        ours = row_of(table, model=seed["model"], link="5gbe")
        for ctx in CONTEXTS:
            parts = ours[ctx].split(" / ")
            printed = seed[ctx].split(" / ")
            printed += ["—"] * (len(parts) - len(printed))
            for mine, theirs in zip(parts, printed, strict=True):
                if leading_number(theirs) is None:
                    assert mine.startswith(tables.FAIL_MARK), (seed["model"], ctx, ours[ctx])
                else:
                    assert leading_number(mine) == leading_number(theirs), (
                        seed["model"], ctx, ours[ctx])


def test_prefill_mechanism_matches_conclusion_1():
    """+55% one-way bandwidth buys +5..17%: prefill is compute-bound (elasticity well
    below 1); the fast MoEs are the most sensitive; Qwen3.6's sensitivity climbs with
    context from 5K to 100K."""
    table = mechanisms.table(SUMMARY, compared(SUMMARY, baseline="5gbe"), LINKS, CONTEXTS)
    prefill = table[table["mechanism"] == "prefill"].set_index("model")
    assert (prefill["slope"] < 0.5).all()
    slow = prefill.drop(index=FAST_MOES)["slope"]
    assert prefill.loc[FAST_MOES, "slope"].min() > slow.max()
    points = mechanisms.mechanism_points(compared(SUMMARY, baseline="5gbe"), LINKS)
    qwen = points[points["model"] == FAST_MOES[0]]
    by_ctx = [fits.fit_through_origin(g["bandwidth_change"], g["prefill_change"])["slope"]
              for ctx in ["5k", "32k", "52k", "100k"]
              for g in [qwen[qwen["ctx"] == ctx]]]
    assert by_ctx == sorted(by_ctx) and by_ctx[0] < by_ctx[-1]


def test_decode_mechanism_needs_both_latencies():
    """The seed measured request-response latency on fake TB5 only: nothing to fit."""
    table = mechanisms.table(SUMMARY, compared(SUMMARY, baseline="5gbe"), LINKS, CONTEXTS)
    decode = table[table["mechanism"] == "decode"]
    assert len(decode) == SUMMARY["model"].nunique()
    assert decode["slope"].isna().all()
    assert decode["verdict"].str.contains("nothing to fit").all()
