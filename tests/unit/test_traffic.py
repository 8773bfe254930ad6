"""Bytes per token predicted from geometry and placement, the cost of moving them, and the
mechanisms' verdict on which term dominates a link's decode delta."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splitbench.analysis import comparison, mechanisms, traffic
from splitbench.backends.llamacpp import servers
from splitbench.report import tables

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
    assert traffic.predicted_bytes(576, 49152, 14, True, 1) == (2304, 196608)
    # Output on A: the hidden state comes back instead of the logits.
    assert traffic.predicted_bytes(576, 49152, 14, False, 1) == (2304, 2304)
    # Two workers: A feeds each, and the first's output returns to A on its way on.
    assert traffic.predicted_bytes(576, 49152, 14, True, 2) == (4608, 2304 + 196608)
    assert traffic.predicted_bytes(576, 49152, 0, False, 1) == (0, 0)
    assert all(np.isnan(traffic.predicted_bytes(None, 49152, 14, True, 1)))


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
    table = tables.link_comparison(summary, ORDER, "baseline", STEADY, predict)
    big = table[(table["model"] == "big") & (table["ctx"] == "short")].iloc[0]
    small = table[(table["model"] == "small") & (table["ctx"] == "short")].iloc[0]
    # 2 round trips x 0.2 ms, plus (196,616 - 37,187) B at 1.19 Gbit/s less the baseline's.
    assert big["predicted Δ (ms/token)"].startswith("+1.41 ±")
    assert "(latency +0.40, bandwidth +1.01)" in big["predicted Δ (ms/token)"]
    assert big["measured vs predicted"].startswith("agrees")
    # The small model's logits (8 KB) fit in the bucket: the A→B protocol bytes too.
    assert "(latency +0.40, bandwidth +0.00)" in small["predicted Δ (ms/token)"]


def test_the_verdict_names_the_term_that_dominates():
    table = mechanisms.table(matrix(), LINKS, ORDER, "baseline", STEADY, predict)
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
    0.40 ±0.80, which may be as large as the bandwidth term (1.01)."""
    vague = TRIPS.assign(round_trips_se=2.0)

    def vague_predict(rows: pd.DataFrame) -> pd.DataFrame:
        return comparison.predicted_decode_delta(rows, LINKS, vague, {}, STEADY)

    table = mechanisms.table(matrix(), LINKS, ORDER, "baseline", STEADY, vague_predict)
    big = table[(table["model"] == "big") & (table["mechanism"] == "decode")].iloc[0]
    assert "latency +0.40 ±0.80" in big["verdict"]
    assert big["verdict"].endswith("neither dominates (they differ by less than ±0.80)")


def test_a_latency_only_fit_would_count_the_logits_as_round_trips():
    """Without the bandwidth term (no bytes measured) the big model's delta reads as
    ~7 round trips: the error the term removes, said in the verdict."""
    blind = matrix().drop(columns=["rpc_bytes_per_token_a_to_b",
                                   "rpc_bytes_per_token_b_to_a"])
    table = mechanisms.table(blind, LINKS, ORDER, "baseline", STEADY)
    big = table[(table["model"] == "big") & (table["mechanism"] == "decode")].iloc[0]
    assert big["slope"] > 6.5
    assert "the bandwidth term is unknown" in big["verdict"]


def test_measured_bytes_against_the_prediction():
    table = traffic.link_traffic(matrix(), LINKS, ORDER)
    row = table[(table["model"] == "big") & (table["link"] == "slow")
                & (table["ctx"] == "short")].iloc[0]
    assert row["on host B"] == "14 blocks + output layer"
    assert row["B→A predicted"] == "196,608"
    assert row["B→A check"] == "agrees (+0.0%)"
    # 12,304 B against a 2,304 B hidden state: 5.3x, flagged, with what the rest is.
    assert row["A→B check"].startswith("⚠ 5.3× the hidden state: the rest is RPC overhead")
    assert row["transfer (ms/token)"] == "A→B 0.000 / B→A 1.072"
    unknown = traffic.link_traffic(matrix().drop(columns=["blocks_on_b"]), LINKS, ORDER)
    assert unknown.iloc[0]["A→B check"] == "—"
    assert unknown.iloc[0]["on host B"] == "— (not in the launch record)"
