"""The findings from the seed write-up's own tables give back its conclusions: a fixed
per-step cost on fake TB5, little prefill bought by bandwidth, the same concurrency on
every link, and the links as it measured them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from splitbench.compare import comparison, mechanisms, whatif
from splitbench.findings import collect as findings
from tests.support.comparison_rows import compared

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SEED_CONTEXTS = ["short", "5k", "32k", "52k", "100k"]


@pytest.fixture(scope="module")
def seed_findings() -> list[findings.Finding]:
    summary = pd.read_csv(FIXTURES / "seed_002_summary.csv")
    links = pd.read_csv(FIXTURES / "seed_002_links.csv")
    comp = comparison.compare_links(summary, "5gbe")
    trips = pd.DataFrame(columns=["pair", "model", "workers", "round_trips", "round_trips_se"])
    comp = pd.concat([comp, comparison.predicted_decode_delta(comp, links, trips, {})], axis=1)
    return findings.collect(summary, links, comp, trips,
                            mechanisms.table(summary,
                                             compared(summary, baseline="5gbe"),
                                             links, SEED_CONTEXTS),
                            whatif.model(summary, links, trips, {}, "5gbe"), SEED_CONTEXTS,
                            "5gbe")


def test_the_seed_fake_tb5_cost_is_a_fixed_per_step_cost(seed_findings):
    """The write-up: fake TB5 trails 5GbE by a constant 1.5-2.9 ms/token, independent of
    model speed and of context length."""
    tb5 = [f for f in seed_findings if f.markdown().startswith("**faketb5 costs decode")]
    assert len(tb5) == 4  # the two dense models are below the write-up's resolution
    for f in tb5:
        cost = float(f.markdown().split("costs decode ")[1].split(" ")[0])
        assert 1.4 <= cost <= 2.3
    glm = next(f for f in tb5 if f.section == "GLM-4.5-Air Q4_K_M")
    assert all("fixed per-step cost" in f.markdown() for f in tb5 if f is not glm)
    # The write-up's cleanest case reads the same at every context, but its 52k cell
    # resolves only ±0.63 ms (its tok/s logged to one decimal): the finding gives the
    # bound the data carry, not the write-up's "stays put".
    assert ("Whether it grows with context is not settled, while the step grows 3.4× "
            "(19.69 → 66.67 ms): from short to 52k it changes by" in glm.markdown()), glm.markdown()
    assert "(by up to 0.69 ms, 95%)" in glm.markdown(), glm.markdown()
    across = next(f for f in seed_findings if f.markdown().startswith("Decode, at each model"))
    assert "faketb5 +1.46 to +2.23 ms/token over 4 models" in across.markdown()
    assert "the cost does not follow model speed" in across.markdown().split("; usb10g")[0]


def test_the_seed_usb10g_bandwidth_buys_little_prefill(seed_findings):
    """The write-up: +55% one-way bandwidth buys only +5% to +17% prefill."""
    across = next(f for f in seed_findings if f.markdown().startswith("Prefill, "))
    assert "usb10g's +55% one-way bandwidth: +4% to +17% prefill at each model's longest " \
           "context" in across.markdown()
    glm = next(f for f in seed_findings if f.section == "GLM-4.5-Air Q4_K_M"
               and "Prefill" in f.markdown())
    assert glm.markdown().startswith("**Prefill no longer depends on the link's bandwidth")


def test_the_seed_concurrency_is_the_same_on_every_link(seed_findings):
    """The write-up's conclusion 4: boundary and collapse are the same on all links."""
    bounds = [f for f in seed_findings if "Usable concurrency" in f.markdown()]
    assert len(bounds) == 6
    assert all(f.markdown().startswith("**Usable concurrency is the same on all 3 links**")
               and "not the link" in f.markdown() for f in bounds)
    qwen = next(f for f in bounds if f.section == "Qwen3.6-35B-A3B Q8_0")
    assert "32k 2 (crashes at 4)" in qwen.markdown()


def test_the_seed_links(seed_findings):
    tb5 = next(f for f in seed_findings if f.markdown().startswith("**faketb5: 4.38"))
    assert "one way on par with 5gbe, but both ways 29% lower (9.38)" in tb5.markdown()
    assert "856 µs at the median, 326 µs of it fixed" in tb5.markdown()


def test_only_a_pair_measured_on_one_link_gets_the_seeds_links(seed_findings):
    assert not any("One link measured" in f.markdown() for f in seed_findings)  # three links
    summary = pd.read_csv(FIXTURES / "seed_002_summary.csv").query("link == '5gbe'")
    links = pd.read_csv(FIXTURES / "seed_002_links.csv").query("link == '5gbe'").assign(
        rr64_p50_us=120.0)
    trips = pd.DataFrame(columns=["pair", "model", "workers", "round_trips", "round_trips_se"])
    comp = comparison.compare_links(summary, "5gbe")
    comp = pd.concat([comp, comparison.predicted_decode_delta(comp, links, trips, {})], axis=1)
    found = findings.collect(summary, links, comp, trips,
                             mechanisms.table(summary,
                                              compared(summary, baseline="5gbe"),
                                              links, SEED_CONTEXTS),
                             whatif.model(summary, links, trips, {}, "5gbe"), SEED_CONTEXTS,
                             "5gbe")
    alone = [f for f in found if f.markdown().startswith("**One link measured (5gbe)")]
    assert len(alone) == summary["model"].nunique() == 6
    glm = next(f for f in alone if f.section == "GLM-4.5-Air Q4_K_M")
    said = glm.markdown()
    assert "From its own step at short (19.69 ms/token), its assumed 1.00 round trips" in said
