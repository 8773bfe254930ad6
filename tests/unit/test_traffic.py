"""Bytes per token predicted from geometry and placement, the cost of moving them, and the
mechanisms' verdict on which term dominates a link's decode delta."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splitbench.backends.llamacpp import servers, traffic_model
from splitbench.compare import comparison, mechanisms, traffic
from splitbench.report import tables
from tests.support.comparison_rows import compared

SMOL = {"n_embd": 576, "n_vocab": 49152}  # SmolLM2-135M's GGUF header
ORDER = ["short", "long"]
CONTEXTS = {"short": 128, "long": 512}

# The lines of this build's llama-server start-up log (verbosity 4) that placement reads,
# from SmolLM2-135M with -ngl 15 and one RPC worker.
SERVER_LOG = """\
0.00.120.639 I load_tensors: loading model tensors, this can take a while... (load_mode = mmap)
0.00.127.557 I load_tensors: offloading output layer to GPU
0.00.127.580 I load_tensors: offloading 14 repeating layers to GPU
0.00.127.587 I load_tensors: offloaded 15/31 layers to GPU
0.00.127.598 I load_tensors:   CPU_Mapped model buffer size =    92.10 MiB
0.00.127.606 I load_tensors: RPC0[127.0.0.1:50999] model buffer size =    58.28 MiB
0.00.257.451 I llama_context:        CPU  output buffer size =     0.75 MiB
0.00.257.524 I llama_kv_cache:        CPU KV buffer size =     6.00 MiB
0.00.262.662 I llama_kv_cache: RPC0[127.0.0.1:50999] KV buffer size =     5.25 MiB
0.00.269.825 I sched_reserve: RPC0[127.0.0.1:50999] compute buffer size =    11.76 MiB
0.00.269.847 I sched_reserve:        CPU compute buffer size =    15.14 MiB
"""


def test_placement_from_the_server_s_start_up_log():
    found = servers.placement(SERVER_LOG)
    assert found["blocks_on_b"] == 14 and found["output_on_b"] is True
    assert (found["layers_on_b"], found["layers_total"]) == (15, 31)
    assert found["model_mib_a"] == 92.10 and found["model_mib_b"] == 58.28
    assert found["kv_mib_b"] == 5.25 and found["compute_mib_a"] == 15.14
    # Blocks only (the output layer kept on A by an override) and a log that is silent.
    kept = SERVER_LOG.replace("offloading output layer to GPU", "")
    assert servers.placement(kept)["output_on_b"] is False
    assert "does not say" in servers.placement("llama_server: model loaded")["error"]


def test_bytes_predicted_from_geometry_and_split():
    # Logits from B: 49,152 x 4 B; the hidden state into B: 576 x 4 B.
    assert traffic_model.predicted_bytes(576, 49152, 14, True, 1) == (2304, 196608)
    # Output on A: the hidden state comes back instead of the logits.
    assert traffic_model.predicted_bytes(576, 49152, 14, False, 1) == (2304, 2304)
    # Two workers: A feeds each, and the first's output returns to A on its way on.
    assert traffic_model.predicted_bytes(576, 49152, 14, True, 2) == (4608, 2304 + 196608)
    assert traffic_model.predicted_bytes(576, 49152, 0, False, 1) == (0, 0)
    assert all(np.isnan(traffic_model.predicted_bytes(None, 49152, 14, True, 1)))


def test_transfer_time_counts_only_what_exceeds_the_burst():
    # 196,608 B at 1.19 Gbit/s on a wire: 1.32 ms; past a 37 KB bucket: 1.07 ms.
    assert traffic.transfer_ms(196608, 0, 1.19) == pytest.approx(1.3217, abs=1e-4)
    assert traffic.transfer_ms(196608, 37187, 1.19) == pytest.approx(1.0717, abs=1e-4)
    assert traffic.transfer_ms(8200, 37187, 1.19) == 0.0


def link_facts(**links: tuple[float, float, int]) -> pd.DataFrame:
    """Link results: (A→B Gbit/s, B→A Gbit/s, burst bytes) per link, a 64 B RR of
    50 us on the baseline and of 50 + 200 us per slow link, spread ±1%."""
    rows = []
    for name, (ab, ba, burst) in links.items():
        rows.append({"pair": "lab", "link": name, "a_to_b_gbps": ab, "b_to_a_gbps": ba,
                     "a_to_b_gbps_min": ab * 0.99, "a_to_b_gbps_max": ab * 1.01,
                     "b_to_a_gbps_min": ba * 0.99, "b_to_a_gbps_max": ba * 1.01,
                     "burst_bytes_a_to_b": burst, "burst_bytes_b_to_a": burst,
                     "rr64_p50_us": 50.0 if name == "baseline" else 250.0,
                     "rr_fixed_us": 40.0 if name == "baseline" else 240.0})
    return pd.DataFrame(rows)


def cells(model: str, vocab: int, decode_ms: dict[str, float]) -> list[dict]:
    """Ok single-stream cells of a model (n_embd 576, 14 blocks + output on B) per link
    and context, with the bytes each way that such a model moves (plus 10 KB of
    protocol A→B)."""
    rows = []
    for link, ms in decode_ms.items():
        for ctx in ORDER:
            rows.append({
                "pair": "lab", "link": link, "model": model, "ctx": ctx, "conc": 1,
                "status": "ok", "decode_ms_per_token": ms + (1.0 if ctx == "long" else 0),
                "decode_ms_se": 0.01, "decode_tps": 1000 / ms, "prefill_tps": 1000.0,
                "uncertainty_from": "requests", "ctx_tokens": CONTEXTS[ctx],
                "rpc_bytes_per_token_a_to_b": 2304.0 + 10000,
                "rpc_bytes_per_token_b_to_a": vocab * 4.0 + 8,
                "model_n_embd": 576, "model_n_vocab": vocab, "blocks_on_b": 14,
                "output_on_b": True, "rpc_workers": 1})
    return rows


STEADY = pd.DataFrame({"pair": ["lab", "lab"], "model": ["big", "small"],
                       "drift_decode_rel": [0.0, 0.0], "drift_prefill_rel": [0.0, 0.0]})
TRIPS = pd.DataFrame({"pair": ["lab", "lab"], "model": ["big", "small"], "workers": [1, 1],
                      "round_trips": [2.0, 2.0], "round_trips_se": [0.05, 0.05]})
# A fast baseline wire (20 Gbit/s) and a 1.19 Gbit/s link with a 37 KB bucket.
LINKS = link_facts(baseline=(20.0, 20.0, 0), slow=(1.10, 1.19, 37187))


def matrix() -> pd.DataFrame:
    """A 49k-vocabulary model and a 2k one on the slow link: both pay 2 round trips x
    0.2 ms; the big one also its logits past the bucket (1.07 ms, against 0.06 ms for
    the same bytes on the baseline), the small one's logits fit in the bucket."""
    big_bw = traffic.transfer_ms(196616, 37187, 1.19) - traffic.transfer_ms(196616, 37187, 20)
    return pd.DataFrame(cells("big", 49152, {"baseline": 20.0, "slow": 20.0 + 0.4 + big_bw})
                        + cells("small", 2048, {"baseline": 1.0, "slow": 1.0 + 0.4}))


def predict(rows: pd.DataFrame) -> pd.DataFrame:
    return comparison.predicted_decode_delta(rows, LINKS, TRIPS, {}, STEADY)


def test_the_bandwidth_term_enters_the_prediction():
    summary = matrix()
    comp = compared(summary, baseline="baseline", drift=STEADY, prediction=predict)
    table = tables.link_comparison(summary, comp, ORDER)
    big = table[(table["model"] == "big") & (table["ctx"] == "short")].iloc[0]
    small = table[(table["model"] == "small") & (table["ctx"] == "short")].iloc[0]
    # 2 round trips x 0.2 ms, plus (196,616 - 37,187) B at 1.19 Gbit/s less the baseline's.
    assert big["predicted Δ (ms/token)"].startswith("+1.41 ±")
    assert "(latency +0.40, bandwidth +1.01)" in big["predicted Δ (ms/token)"]
    assert big["measured vs predicted"].startswith("agrees")
    # The small model's logits (8 KB) fit in the bucket: the A→B protocol bytes too.
    assert "(latency +0.40, bandwidth +0.00)" in small["predicted Δ (ms/token)"]


def test_the_verdict_names_the_term_that_dominates():
    comp = compared(matrix(), baseline="baseline", drift=STEADY, prediction=predict)
    table = mechanisms.table(matrix(), comp, LINKS, ORDER)
    big = table[(table["model"] == "big") & (table["mechanism"] == "decode")].iloc[0]
    small = table[(table["model"] == "small") & (table["mechanism"] == "decode")].iloc[0]
    # What latency must explain after the bandwidth term: 2 round trips either way.
    assert big["slope"] == pytest.approx(2.0, abs=0.01)
    assert small["slope"] == pytest.approx(2.0, abs=0.01)
    assert "bandwidth +1.01 ±0.01 (B→A 196.6 KB at 1.19 Gbit/s)" in big["verdict"]
    assert "+ latency +0.40 ±0.02" in big["verdict"]
    assert big["verdict"].endswith("bandwidth dominates")
    assert small["verdict"].endswith("latency dominates")
    assert big["bandwidth term (ms/token)"] == "slow +1.01"


def test_no_term_dominates_inside_their_uncertainty():
    """A sweep that could not pin the round trips down (2 ±4): the latency term is
    0.40 ±0.78, which may be as large as the bandwidth term (1.01)."""
    vague = TRIPS.assign(round_trips_se=2.0)

    def vague_predict(rows: pd.DataFrame) -> pd.DataFrame:
        return comparison.predicted_decode_delta(rows, LINKS, vague, {}, STEADY)

    comp = compared(matrix(), baseline="baseline", drift=STEADY, prediction=vague_predict)
    table = mechanisms.table(matrix(), comp, LINKS, ORDER)
    big = table[(table["model"] == "big") & (table["mechanism"] == "decode")].iloc[0]
    assert "latency +0.40 ±0.78" in big["verdict"]
    assert big["verdict"].endswith("neither dominates (they differ by less than ±0.78)")


def test_a_latency_only_fit_would_count_the_logits_as_round_trips():
    """Without the bandwidth term (no bytes measured) the big model's delta reads as
    ~7 round trips: the error the term removes, said in the verdict."""
    blind = matrix().drop(columns=["rpc_bytes_per_token_a_to_b",
                                   "rpc_bytes_per_token_b_to_a"])
    table = mechanisms.table(blind,
                             compared(blind, baseline="baseline", drift=STEADY), LINKS, ORDER)
    big = table[(table["model"] == "big") & (table["mechanism"] == "decode")].iloc[0]
    assert big["slope"] > 6.5
    assert "the bandwidth term is unknown" in big["verdict"]


def test_measured_bytes_against_the_prediction():
    table = traffic.link_traffic(matrix(), LINKS, ORDER, "baseline")
    row = table[(table["model"] == "big") & (table["link"] == "slow")
                & (table["ctx"] == "short")].iloc[0]
    assert row["on host B"] == "14 blocks + output layer"
    assert row["B→A predicted"] == "196,608"
    assert row["B→A check"] == "agrees (+0.0%)"
    # The baseline's short cell moved 12,304 B: 2,304 hidden + 512 mask (one step of 129
    # cells, padded to 256) + 9,488 of protocol, which every other cell is predicted with.
    assert row["A→B predicted"] == ("12,304 = 2,304 hidden + 512 mask (256 KV cells) + "
                                    "9,488 overhead (measured on baseline short)")
    assert row["A→B check"] == "agrees (+0.0%)"
    reference = table[(table["model"] == "big") & (table["link"] == "baseline")
                      & (table["ctx"] == "short")].iloc[0]
    assert reference["A→B check"] == "— (the overhead is measured here)"
    assert row["transfer (ms/token)"] == "A→B 0.000 / B→A 1.072"
    unknown = traffic.link_traffic(matrix().drop(columns=["blocks_on_b"]), LINKS, ORDER)
    assert unknown.iloc[0]["A→B check"] == "—"
    assert unknown.iloc[0]["on host B"] == "— (not in the launch record)"


# Bytes A→B per decoded token measured on this build (one worker, concurrency 1, 64
# tokens, kernel counters): model -> (n_embd, n_vocab, blocks on B, {prompt: bytes}). The
# first prompt of each is the baseline's shortest context, where the overhead is measured.
MEASURED = {
    # The embedded default's model (2 layers, width 64; 1 block + output on B).
    "synth": (64, 2048, 1, {128: 3862, 5000: 13590, 32000: 67862}),
    # SmolLM2-135M, 14 blocks + output on B (-ngl 15).
    "smol": (576, 49152, 14, {64: 12013, 2048: 16109}),
    # A 6-layer GQA synthetic (width 384, 6 heads / 2 KV heads; 2 blocks + output on B).
    # 2,000 tokens cross 2,048 KV cells during decode: the graph is sent again once.
    "gqa6": (384, 2048, 2, {64: 6614, 2000: 10794, 2048: 10710, 2100: 10710}),
}


def measured_cells(links: tuple[str, ...] = ("baseline",)) -> pd.DataFrame:
    rows = []
    for model, (n_embd, n_vocab, blocks, by_prompt) in MEASURED.items():
        for link in links:
            for prompt, a_to_b in by_prompt.items():
                rows.append({"pair": "lab", "link": link, "model": model,
                             "ctx": f"p{prompt}", "conc": 1, "status": "ok",
                             "ctx_tokens": prompt, "prompt_tokens": float(prompt),
                             "generated_tokens": 64.0,
                             "rpc_bytes_per_token_a_to_b": float(a_to_b),
                             "rpc_bytes_per_token_b_to_a": n_vocab * 4.0 + 8,
                             "model_n_embd": n_embd, "model_n_vocab": n_vocab,
                             "blocks_on_b": blocks, "output_on_b": True, "rpc_workers": 1,
                             "backend": "llamacpp", "split": "rpc"})
    return pd.DataFrame(rows)


ALL_CONTEXTS = sorted({f"p{p}" for *_, by in MEASURED.values() for p in by},
                      key=lambda c: int(c[1:]))


def test_the_prediction_holds_every_measured_figure_within_5_percent():
    cells = measured_cells()
    predicted = traffic.with_predictions(cells, "baseline")
    gap = predicted["predicted_bytes_a_to_b"] / cells["rpc_bytes_per_token_a_to_b"] - 1
    assert gap.abs().max() < 0.05, predicted.assign(gap=gap)[["model", "ctx", "gap"]]
    # The overhead is what the shortest context moved beyond hidden state and mask:
    # 3,862 - 256 - 2 x 256 cells.
    synth = predicted[predicted["model"] == "synth"].set_index("ctx")
    assert synth["step_overhead_bytes"].iloc[0] == 3094
    # The mask grows with the padded KV cells: 5,001..5,063 -> 5,120; 32,001.. -> 32,256.
    assert synth.loc["p5000", "kv_cells"] == 5120 and synth.loc["p32000", "kv_cells"] == 32256
    # Without a crossing of the KV padding the prediction is exact.
    exact = predicted[predicted["graph_uploads"] == 1]
    assert (exact["predicted_bytes_a_to_b"] == exact["rpc_bytes_per_token_a_to_b"]).all()
    assert (predicted["predicted_bytes_b_to_a"] + 8 ==
            cells["rpc_bytes_per_token_b_to_a"]).all()


def test_the_mask_covers_the_padded_kv_cells_of_each_decode_step():
    # 64 tokens after a 2,000-token prompt: 48 steps at 2,048 cells, 15 at 2,304.
    assert traffic_model.mask_cells(2000, 64) == pytest.approx((48 * 2048 + 15 * 2304) / 63)
    assert traffic_model.graph_uploads(2000, 64) == 2
    assert traffic_model.graph_uploads(2048, 64) == 1
    # Two workers each get the hidden state; the one with blocks gets the mask.
    assert traffic_model.predicted_bytes(576, 49152, 1, True, 2, 256, 1000) == (
        2 * 2304 + 512 + 1000, 2304 + 196608)


def test_the_default_run_s_shape_flags_nothing():
    """Four links x three contexts of the embedded default, moving what this build
    measured: no row flagged (each was, against the hidden state alone: 12 of 12)."""
    cells = measured_cells(("baseline", "5gbe", "usb4", "usb10g"))
    cells = cells[cells["model"] == "synth"]
    table = traffic.link_traffic(cells, LINKS, ["p128", "p5000", "p32000"], "baseline")
    assert len(table) == 12
    flagged = table[table.apply(lambda r: any("⚠" in str(v) for v in r), axis=1)]
    assert flagged.empty, flagged
    # All but the baseline's shortest context, where the overhead is measured.
    assert (table["A→B check"].str.startswith("agrees")).sum() == 11
    # What the old prediction was: the hidden state alone, 15x to 265x below.
    hidden = cells["model_n_embd"] * traffic_model.F32
    assert (cells["rpc_bytes_per_token_a_to_b"] / hidden > 1 + traffic.TOLERANCE).all()


def test_twice_the_predicted_bytes_are_flagged():
    cells = measured_cells()
    at = (cells["model"] == "synth") & (cells["ctx"] == "p5000")
    cells.loc[at, "rpc_bytes_per_token_a_to_b"] *= 2
    table = traffic.link_traffic(cells, LINKS, ALL_CONTEXTS, "baseline").set_index(
        ["model", "ctx"])
    assert table.loc[("synth", "p5000"), "A→B check"] == (
        "⚠ 2.00× the prediction: more than the model and the protocol move")
    assert table.loc[("synth", "p32000"), "A→B check"].startswith("agrees")
    # Half the logits back: less than the model must move.
    cells.loc[at, "rpc_bytes_per_token_b_to_a"] /= 2
    table = traffic.link_traffic(cells, LINKS, ALL_CONTEXTS, "baseline").set_index(
        ["model", "ctx"])
    assert table.loc[("synth", "p5000"), "B→A check"].startswith(
        "⚠ 0.50× the prediction: less than the model must move")


def test_a_crossing_of_the_kv_padding_allows_one_more_graph_upload():
    """2,000 tokens: the graph is sent again at 2,049 cells (7,831 B against 7,559 with
    the mask's difference taken out). The prediction (c + g per upload, c and g unknown
    apart) allows up to one more overhead; far more than that is flagged."""
    cells = measured_cells()
    table = traffic.link_traffic(cells, LINKS, ALL_CONTEXTS, "baseline").set_index(
        ["model", "ctx"])
    assert table.loc[("gqa6", "p2000"), "A→B check"] == (
        "agrees (+4.6%; the graph re-sent as the KV cache grew: +4,566 B allowed)")
    at = (cells["model"] == "gqa6") & (cells["ctx"] == "p2000")
    cells.loc[at, "rpc_bytes_per_token_a_to_b"] = 10320 + 4566 * 1.5
    table = traffic.link_traffic(cells, LINKS, ALL_CONTEXTS, "baseline").set_index(
        ["model", "ctx"])
    assert table.loc[("gqa6", "p2000"), "A→B check"].startswith("⚠ 1.66× the prediction")


def test_only_the_output_layer_on_b_gets_no_mask():
    """The backends example's llama.cpp split (0 blocks + output layer on B) moved 2,064 B
    A→B per token at 32 and at 512 tokens: no attention on B, no mask."""
    cells = pd.DataFrame([{"pair": "lab", "link": "plain", "model": "rpc", "ctx": ctx,
                           "conc": 1, "status": "ok", "ctx_tokens": n, "prompt_tokens": n,
                           "generated_tokens": 32, "rpc_bytes_per_token_a_to_b": 2064.0,
                           "rpc_bytes_per_token_b_to_a": 4104.0, "model_n_embd": 128,
                           "model_n_vocab": 1024, "blocks_on_b": 0, "output_on_b": True,
                           "rpc_workers": 1} for ctx, n in (("short", 32), ("mid", 512))])
    table = traffic.link_traffic(cells, LINKS, ["short", "mid"], "plain").set_index("ctx")
    assert table.loc["mid", "A→B predicted"] == (
        "2,064 = 512 hidden + no mask (no blocks on B) + 1,552 overhead (measured on plain "
        "short)")
    assert table.loc["mid", "A→B check"] == "agrees (+0.0%)"


def test_vllm_cells_have_no_prediction_and_no_flag():
    cells = measured_cells()
    cells = pd.concat([cells, cells.assign(model="tp", backend="vllm", split="tp2",
                                           blocks_on_b=None, output_on_b=None,
                                           rpc_workers=None,
                                           rpc_bytes_per_token_a_to_b=99999.0)])
    table = traffic.link_traffic(cells, LINKS, ALL_CONTEXTS, "baseline")
    tp = table[table["model"] == "tp"]
    assert (tp["A→B predicted"] == "no prediction for vLLM").all()
    assert (tp["B→A predicted"] == "no prediction for vLLM").all()
    assert not tp.apply(lambda r: any("⚠" in str(v) for v in r), axis=1).any()
    assert (tp["on host B"] == "vLLM TP=2: every layer split across A and B").all()


def test_without_an_overhead_only_too_few_bytes_are_flagged():
    """No bytes measured on the baseline link: nothing to measure the overhead on; the
    hidden state and the mask are still a floor."""
    cells = measured_cells(("baseline", "slow"))
    cells = cells[cells["model"] == "synth"]
    cells.loc[cells["link"] == "baseline", "rpc_bytes_per_token_a_to_b"] = np.nan
    cells.loc[cells["ctx"] == "p32000", "rpc_bytes_per_token_a_to_b"] = 30000.0
    table = traffic.link_traffic(cells, LINKS, ["p128", "p5000", "p32000"], "baseline")
    slow = table[table["link"] == "slow"].set_index("ctx")
    assert slow.loc["p5000", "A→B check"] == "—"
    assert "no overhead measured" in slow.loc["p5000", "A→B predicted"]
    # 30,000 B against 256 hidden + 64,512 mask, on both links (and the baseline's
    # gives no overhead either).
    assert slow.loc["p32000", "A→B check"].startswith("⚠ 0.46× the hidden state and mask")
    base = table[table["link"] == "baseline"].set_index("ctx")
    assert base.loc["p32000", "A→B check"].startswith("⚠ 0.46× the hidden state and mask")


def test_a_launch_counts_what_b_received_and_apart_what_a_sent_again(monkeypatch):
    """Segments a busy receiver dropped are sent twice: the launch's bytes are what B
    acknowledged, each byte once, the second copies beside them."""
    found = [{"bytes_sent": 1_100, "bytes_acked": 1_000, "bytes_retrans": 100,
              "bytes_received": 40, "data_segs_out": 3, "data_segs_in": 2},
             {"bytes_sent": 500, "bytes_acked": 500, "bytes_retrans": 0,
              "bytes_received": 10, "data_segs_out": 1, "data_segs_in": 1}]
    monkeypatch.setattr(servers.sockdiag, "connections_to",
                        lambda addr, port: [found[port - 1]])
    assert servers.load_bytes("10.0.0.2", [1, 2]) == {
        "a_to_b": 1_500, "a_to_b_resent": 100, "b_to_a": 50, "connections": 2}
