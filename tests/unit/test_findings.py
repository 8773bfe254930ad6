"""The findings: each branch of the wording from constructed tables (the seed write-up's
own tables are test_seed_findings.py's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from splitbench.compare import whatif
from splitbench.contracts import findings_file
from splitbench.findings import collect as findings
from splitbench.findings import text as finding_text
from splitbench.findings import written
from splitbench.health import checks
from tests.support.comparison_rows import comp_rows

FIXTURES = Path(__file__).resolve().parent / "fixtures"
def test_a_latency_dominated_fixed_cost():
    rows = comp_rows("usb4", [(0.70, 0.06), (0.72, 0.10), (0.69, 0.20)],
                     latency=(0.64, 0.03), bandwidth=(0.00, 0.00), trips=1.05, gap_us=610)
    text = findings.decode_cost(rows, "usb4", "m").markdown()
    assert text.startswith("**usb4 costs decode +0.70 ±0.06 ms/token at short "
                           "(+82% of a 0.85 ms step)**")
    # +0.69 ±0.20 at the longest context: from short it may have moved by up to
    # |0.69 - 0.70| + hypot(0.06, 0.20) = 0.22 ms, more than 25% of +0.70: a bound, not
    # "the same".
    assert "Whether it grows with context is not settled" in text
    assert "from short to 32k it changes by -0.01 ±0.21 ms (by up to 0.22 ms, 95%)" in text
    assert "The same at every context" not in text
    # Resolved well enough at every context: within 25% of the cost, "the same".
    tight = comp_rows("usb4", [(0.70, 0.06), (0.72, 0.05), (0.69, 0.05)],
                      latency=(0.64, 0.03), bandwidth=(0.00, 0.00), trips=1.05, gap_us=610)
    same = findings.decode_cost(tight, "usb4", "m").markdown()
    assert ("The same at every context it resolves, while the step grows" in same
            and "the contexts differ by at most 0.09 ms (within 25% of its +0.70), "
            "a fixed per-step cost" in same), same
    assert "1.05 round trips per token × +610 µs" in text
    assert "latency dominates" in text
    assert "agrees with that prediction" in text


def test_the_decode_turns_own_waits_stand_beside_the_probes_latency():
    rows = comp_rows("usb4", [(0.70, 0.06)], latency=(0.64, 0.03), bandwidth=(0.00, 0.00),
                     trips=1.05, gap_us=610).assign(turn_wait_delta_us=624.0,
                                                    turn_wait_delta_unc_us=17.0)
    text = findings.decode_cost(rows, "usb4", "m").markdown()
    assert ("1.05 round trips per token × +610 µs of extra request-response latency = "
            "+0.64 ±0.03 (its decode turns themselves waited +624 ±17 µs more, from the "
            "packets)") in text, text
    without = findings.decode_cost(rows.drop(columns=["turn_wait_delta_us"]), "usb4", "m")
    assert "waited" not in without.markdown()


def test_a_disagreement_says_where_host_a_own_time_changed():
    rows = comp_rows("x", [(0.04, 0.01)], latency=(0.08, 0.00), bandwidth=(0.00, 0.00),
                     trips=1.0, gap_us=80).assign(turn_wait_delta_us=97.0,
                                                  turn_wait_delta_unc_us=3.0)
    unexplained = findings.decode_cost(rows, "x", "m").markdown()
    assert "⚠ The measured +0.04 disagrees with the prediction +0.08" in unexplained
    assert "something else differs between the links" in unexplained
    measured = rows.assign(a_time_delta_us=-45.0, a_time_delta_unc_us=10.0)
    text = findings.decode_cost(measured, "x", "m").markdown()
    assert ("(its decode turns themselves waited +97 ±3 µs more, and host A's own time per "
            "token outside them changed by -45 ±10 µs, from the packets)") in text, text
    assert "host A's own time per token changed by -45 µs, which no latency term" in text
    assert "something else differs" not in text
    # Inside its ±: not a change, and not said.
    blurred = rows.assign(a_time_delta_us=-5.0, a_time_delta_unc_us=10.0)
    assert "host A" not in findings.decode_cost(blurred, "x", "m").markdown()


def test_neither_term_dominates():
    rows = comp_rows("mid", [(1.10, 0.10), (1.12, 0.10), (1.08, 0.10)],
                     latency=(0.55, 0.30), bandwidth=(0.50, 0.30), trips=1.0, gap_us=550)
    assert "neither dominates" in findings.decode_cost(rows, "mid", "m").markdown()


def test_a_disagreement_with_the_prediction_is_flagged():
    rows = comp_rows("odd", [(2.00, 0.05), (2.0, 0.05), (2.0, 0.05)],
                     latency=(0.50, 0.02), bandwidth=(0.00, 0.00), trips=1.0, gap_us=500)
    assert "⚠ The measured +2.00 disagrees with the prediction +0.50" in \
        findings.decode_cost(rows, "odd", "m").markdown()


def test_a_cost_inside_its_uncertainty_is_not_resolvable_and_says_what_would_resolve_it():
    rows = comp_rows("usb4", [(0.05, 0.30), (0.4, 1.0), (2.0, 4.6)])
    text = findings.decode_cost(rows, "usb4", "m").markdown()
    assert "**usb4: what it costs decode is not resolvable on this data**" in text
    assert "cell.paired.rounds" in text
    sequential = comp_rows("usb4", [(0.05, 0.30)] * 3, compared="sequential")
    assert "cell.paired.contexts" in findings.decode_cost(sequential, "usb4", "m").markdown()


def test_one_resolved_context_leaves_constancy_unresolved():
    rows = comp_rows("usb4", [(0.70, 0.06), (0.9, 1.0), (2.0, 4.6)], compared="sequential")
    text = findings.decode_cost(rows, "usb4", "m").markdown()
    assert "costs decode +0.70 ±0.06" in text
    assert "Whether it stays the same at longer contexts is not resolvable on this data" in text


def test_a_failed_cell_is_named():
    rows = comp_rows("usb4", [(0.70, 0.06), (0.7, 0.1), (np.nan, np.nan)],
                     statuses=["ok", "ok", "crash"])
    text = findings.decode_cost(rows, "usb4", "m").markdown()
    assert "Not measured at 32k (the cell: crash)" in text


def summary_cells(statuses: dict[str, dict[tuple[str, int], str]],
                  overlaps: dict[tuple[str, str, int], tuple[float, float]]) -> pd.DataFrame:
    rows = []
    for link, by_cell in statuses.items():
        for (ctx, conc), status in by_cell.items():
            value, unc = overlaps.get((link, ctx, conc), (np.nan, np.nan))
            rows.append({"pair": "lab", "model": "m", "link": link, "ctx": ctx, "conc": conc,
                         "status": status, "overlap": value, "overlap_unc": unc})
    return pd.DataFrame(rows)


def test_a_concurrency_collapse_that_does_not_depend_on_the_link():
    levels = {("short", 1): "ok", ("short", 2): "ok", ("short", 4): "ok",
              ("32k", 1): "ok", ("32k", 2): "ok", ("32k", 4): "crash"}
    overlaps = {(link, ctx, 4): value for link in ("base", "usb4") for ctx, value in
                (("short", (0.90, 0.05)), ("32k", (0.05, 0.04)))}
    cells = summary_cells({"base": levels, "usb4": levels}, overlaps)
    found = findings.concurrency(cells, ["short", "32k"], "m")
    text = " ".join(f.markdown() for f in found)
    assert "**Usable concurrency is the same on all 2 links**: short 4; 32k 2 (crashes at 4)" \
        in text
    assert "the limit is memory or compute, not the link" in text
    assert "4-way overlap is the same on every link within its ±" in text
    assert "It falls from 0.90 or more at short to 0.05 or less at 32k on every link" in text


def test_concurrency_that_depends_on_the_link():
    good = {("short", 1): "ok", ("short", 2): "ok", ("short", 4): "ok"}
    bad = {("short", 1): "ok", ("short", 2): "ok", ("short", 4): "timeout"}
    overlaps = {("base", "short", 2): (0.80, 0.04), ("usb4", "short", 2): (0.30, 0.05)}
    cells = summary_cells({"base": good, "usb4": bad}, overlaps)
    text = " ".join(f.markdown() for f in findings.concurrency(cells, ["short"], "m"))
    assert "**Usable concurrency differs between links**: at short, base 4 and usb4 2 " \
           "(times out at 4)" in text


def test_overlap_without_a_spread_is_not_compared_between_links():
    levels = {("short", 1): "ok", ("short", 2): "ok"}
    cells = summary_cells({"base": levels, "usb4": levels},
                          {("base", "short", 2): (0.8, np.nan),
                           ("usb4", "short", 2): (0.3, np.nan)}).drop(columns="overlap_unc")
    text = " ".join(f.markdown() for f in findings.concurrency(cells, ["short"], "m"))
    assert "whether it differs between links is not resolvable on this data" in text


def test_what_did_not_work_comes_first_and_its_lines_end_the_run():
    lines = [("ok", "drift: lab/m steady"),
             ("failed", "link lab/usb4 failed verification (its blocks were not launched): "
                        "iperf3 refused")]
    summary = summary_cells({"base": {("short", 1): "ok"}}, {}).assign(
        decode_ms_per_token=1.0)
    empty = comp_rows("usb4", [(0.0, 0.0)]).iloc[0:0]
    found = findings.collect(summary, pd.DataFrame(columns=["pair", "link"]), empty,
                             pd.DataFrame(columns=["pair", "model", "workers"]),
                             pd.DataFrame(), pd.DataFrame(columns=whatif.MODEL_COLUMNS),
                             ["short"], "base", lines)
    text = written.markdown(found)
    assert text.splitlines()[2] == "### What did not work"
    assert text.splitlines()[4].startswith("- ✗ link lab/usb4 failed verification")
    assert findings_file.headlines([f.record() for f in found])[0].startswith(
        "✗ link lab/usb4 failed verification")


def test_a_table_that_flags_most_of_its_rows_is_a_flagged_check(tmp_path):
    pd.DataFrame({"link": ["a", "b", "c", "d"],
                  "figure": ["1.0 ⚠", "2.0 ⚠", "3.0", "4.0"]}).to_csv(tmp_path / "x.csv",
                                                                      index=False)
    pd.DataFrame({"link": ["a", "b", "c", "d"],
                  "figure": ["1.0 ⚠", "2.0", "3.0", "4.0"]}).to_csv(tmp_path / "y.csv",
                                                                    index=False)
    assert checks.flagged_tables(tmp_path) == [
        ("flagged", "table x: ⚠ on 2 of 4 rows (the notes under it say why)")]
    (tmp_path / "x.csv").unlink()
    assert checks.flagged_tables(tmp_path)[0][0] == "ok"


def test_an_offset_shared_by_every_link_is_said_once():
    rows = pd.concat([
        comp_rows("a", [(0.07, 0.02)], latency=(0.12, 0.00), bandwidth=(0.0, 0.0), trips=1.0,
                  gap_us=120),
        comp_rows("b", [(0.12, 0.01)], latency=(0.17, 0.00), bandwidth=(0.0, 0.0), trips=1.0,
                  gap_us=170),
        comp_rows("c", [(0.58, 0.01)], latency=(0.62, 0.01), bandwidth=(0.0, 0.0), trips=1.0,
                  gap_us=620)], ignore_index=True)
    found = findings.common_offset(rows)
    assert found is not None
    assert found.markdown().startswith("⚠ a at short, b at short and c at short all differ from "
                                 "their predictions by the same -0.05 to -0.04 ms/token")
    # One link off alone, or links off in opposite directions, is each link's own.
    assert findings.common_offset(rows.iloc[:1]) is None
    opposite = rows.assign(decode_delta_ms=[0.07, 0.22, 0.58])
    assert findings.common_offset(opposite) is None
    assert "the way latency is measured" in found.markdown()
    # Where the packets measured host A's own time moving with every gap, it says so.
    on_a = findings.common_offset(rows.assign(a_time_delta_us=[-48.0, -41.0, -45.0],
                                              a_time_delta_unc_us=[9.0, 12.0, 8.0]))
    assert "The packets place it on host A: its own time per token, outside the turns " \
           "that wait for B, changed by -48 to -41 µs on every link" in on_a.markdown()
    assert "the way latency is measured" not in on_a.markdown()
    one_unresolved = findings.common_offset(rows.assign(
        a_time_delta_us=[-48.0, -4.0, -45.0], a_time_delta_unc_us=[9.0, 12.0, 8.0]))
    assert "the way latency is measured" in one_unresolved.markdown()


def test_round_trips_against_the_topological_floor():
    trips = pd.DataFrame([
        {"pair": "lab", "model": "m", "workers": 1, "round_trips": 1.02, "round_trips_se": 0.02},
        {"pair": "lab", "model": "m", "workers": 2, "round_trips": 3.10, "round_trips_se": 0.05}])
    model = pd.DataFrame([{"pair": "lab", "model": "m", "ctx": "short", "round_trips": 1.02,
                           "compute_ms": 0.40}])
    trips["round_trips_from"] = ["the delay sweep", "counted from the RPC packets"]
    text = findings.round_trip_floor(trips, model, "m").markdown()
    assert text.startswith("**1.02 ±0.04 round trips per token with 1 RPC worker** "
                           "(the delay sweep; the floor is 1: at the floor)")
    assert "3.10 ±0.10 round trips per token with 2 RPC workers (counted from the RPC " \
           "packets; the floor is 2: +1.10 above the floor" in text
    assert "Below ~20 µs of request-response latency" in text  # 5% of 0.40 ms / 1.02
    assert "(its 1.02 round trips add" in text
    none = findings.round_trip_floor(trips.iloc[0:0], model, "m").markdown()
    assert none.startswith("**Why a link costs what it does is not resolvable on this data**")
    # What the what-if then used is the floor, and the finding says it was assumed.
    assert "(its assumed 1.02 round trips add" in none
    assert "RPC packets" in none
    # A vLLM split has no RPC packets to count: its sentence says what its run measures.
    vllm = findings.round_trip_floor(trips.iloc[0:0], model, "m", split="tp2").markdown()
    assert vllm.startswith("**Why a link costs what it does is not resolvable on this "
                           "data**: vLLM's ranks talk over connections of their own")
    assert "RPC packets" not in vllm and "bytes per token" in vllm
    assert "assumed" not in vllm  # no round trips guessed for it either


def test_a_link_measured_faster_than_the_baseline_is_flagged_never_a_saving():
    """Sequential cells on a machine whose speed moved (the backends example's PP=2 at
    its mid context read -2.41 ±1.73 ms/token on a 0.1 Gbit/s link)."""
    faster = comp_rows("narrow", [(1.70, 2.19), (-2.41, 1.73)], compared="sequential")
    text = findings.decode_cost(faster.iloc[:2], "narrow", "m").markdown()
    assert text.startswith("**⚠ narrow: decode measured faster than the baseline, which "
                           "no link can be** (5k -2.41 ±1.73 ms/token): the machine's")
    assert "saves" not in text and "cell.paired.contexts" in text
    mixed = comp_rows("usb4", [(0.70, 0.06), (-0.50, 0.20)])
    text = findings.decode_cost(mixed.iloc[:2], "usb4", "m").markdown()
    assert text.startswith("**usb4 costs decode +0.70 ±0.06 ms/token at short")
    assert "⚠ It measured faster than the baseline at 5k -0.50 ±0.20 ms/token" in text


def _collect(summary: pd.DataFrame, comp: pd.DataFrame, links: pd.DataFrame
             ) -> list[findings.Finding]:
    trips = pd.DataFrame(columns=["pair", "model", "workers", "round_trips", "round_trips_se"])
    return findings.collect(summary, links, comp, trips, pd.DataFrame(),
                            pd.DataFrame(columns=whatif.MODEL_COLUMNS), ["short"], "base")


def test_a_finding_drawn_from_flagged_cells_carries_the_flag_in_its_headline():
    """Two CPU hogs beside a run flagged every cell; the findings' headlines, the lines
    the run ends with, said "slow costs decode +2.08 ±0.01" with no ⚠ of their own."""
    busy = "hosts A and B: other processes used 1.57 cores (limit 0.25 cores) during the cell"
    levels = {("short", 1): "ok", ("short", 2): "ok"}
    overlaps = {(link, "short", 2): (0.7, 0.05) for link in ("base", "usb4")}
    links = pd.DataFrame([{"pair": "lab", "link": link, "a_to_b_gbps": 5.0,
                           "b_to_a_gbps": 5.0, "flags": None} for link in ("base", "usb4")])
    quiet_cells = summary_cells({"base": levels, "usb4": levels}, overlaps).assign(flags=None)
    quiet_comp = comp_rows("usb4", [(0.70, 0.06)]).assign(flags=None, flags_base=None)
    quiet_found = _collect(quiet_cells, quiet_comp, links)
    quiet = findings_file.headlines([f.record() for f in quiet_found])
    assert quiet and not any("⚠" in line for line in quiet)

    busy_cells = quiet_cells.assign(flags=np.where(quiet_cells["link"] == "usb4", busy, None))
    busy_comp = quiet_comp.assign(flags=busy)
    busy_links = links.assign(flags=["iperf3 retransmits", None])
    found = _collect(busy_cells, busy_comp, busy_links)
    heads = findings_file.headlines([f.record() for f in found])
    assert "m: ⚠ usb4 costs decode +0.70 ±0.06 ms/token at short (+82% of a 0.85 ms step)" \
        in heads
    assert "m: ⚠ Usable concurrency is the same on all 2 links" in heads
    assert "m: ⚠ 2-way overlap is the same on every link within its ±" in heads
    assert "The links: ⚠ base: 5.00 Gbit/s A→B and 5.00 B→A" in heads
    assert "The links: usb4: 5.00 Gbit/s A→B and 5.00 B→A" in heads  # its own is clean
    decode = next(f.markdown() for f in found if "costs decode" in f.markdown())
    assert f"⚠ It rests on flagged cells, usb4 short (the first: {busy})" in decode
    overlap = next(f.markdown() for f in found if "overlap" in f.markdown())
    assert "usb4 short 2-way" in overlap and "usb4 short," not in overlap


def test_what_holds_across_models_carries_the_flags_of_the_cells_it_rests_on():
    """Beside two CPU hogs, a real model and the synthetic one: every per-model finding
    carried ⚠, the "Across models" lines drawn from the same cells did not."""
    busy = "hosts A and B: other processes used 1.21 cores (limit 0.25 cores) during the cell"
    comp = pd.concat([comp_rows("usb4", [(2.93, 0.50)], steps=(17.29,)).assign(model="smol"),
                      comp_rows("usb4", [(0.58, 0.08)], steps=(0.96,)).assign(model="synth")])
    links = pd.DataFrame([{"pair": "lab", "link": link, "a_to_b_gbps": 5.0,
                           "b_to_a_gbps": 5.0, "flags": None} for link in ("base", "usb4")])
    cells = summary_cells({"base": {("short", 1): "ok"}, "usb4": {("short", 1): "ok"}}, {})
    cells = pd.concat([cells.assign(model="smol"), cells.assign(model="synth")])

    def across(comp):
        found = _collect(cells.assign(flags=None), comp, links)
        return next(f.markdown() for f in found if f.section == "Across models")

    quiet = across(comp.assign(flags=None, flags_base=None))
    assert quiet.startswith("Decode, at each model's shortest resolved context: usb4 +0.58 "
                            "to +2.93 ms/token") and "⚠" not in quiet
    flagged = across(comp.assign(flags=[busy, None], flags_base=None))
    assert flagged.startswith(f"⚠ {quiet[:-1]}")
    assert f"⚠ It rests on flagged cells, usb4 short (the first: {busy})" in flagged


def test_a_flagged_sweep_flags_the_round_trips_and_the_verdicts_that_rest_on_them():
    """Beside two CPU hogs the cells were flagged and the round-trip line was not,
    though its sweep ran beside the same hogs."""
    levels = {("short", 1): "ok"}
    links = pd.DataFrame([{"pair": "lab", "link": link, "a_to_b_gbps": 5.0,
                           "b_to_a_gbps": 5.0, "flags": None} for link in ("base", "usb4")])
    cells = summary_cells({"base": levels, "usb4": levels}, {}).assign(flags=None)
    comp = comp_rows("usb4", [(0.70, 0.06)]).assign(flags=None, flags_base=None)
    busy = ("host A: other processes used 1.41 cores (limit 0.25 cores) during the "
            "sweep's rounds")
    trips = pd.DataFrame([{"pair": "lab", "model": "m", "workers": 1, "round_trips": 1.02,
                           "round_trips_se": 0.02, "round_trips_from": "the delay sweep",
                           "turns_counted": 1.0, "flags": flags}
                          for flags in (None, busy)])
    model = pd.DataFrame(columns=whatif.MODEL_COLUMNS)

    def heads(trips: pd.DataFrame) -> list[str]:
        found = findings.collect(cells, links, comp, trips, pd.DataFrame(), model,
                                 ["short"], "base")
        return findings_file.headlines([f.record() for f in found])

    quiet = heads(trips.iloc[:1])
    assert "m: 1.02 ±0.04 round trips per token with 1 RPC worker" in quiet
    assert not any("⚠" in line for line in quiet)
    flagged = heads(trips.iloc[1:])
    assert "m: ⚠ 1.02 ±0.04 round trips per token with 1 RPC worker" in flagged
    assert any(line.startswith("m: ⚠ usb4 costs decode +0.70") for line in flagged), flagged
    assert findings.sweep_flags(trips) == [("the 1-worker sweep", busy)]


def test_many_flagged_cells_are_counted_not_named():
    """Under CPU hogs every cell is flagged; the concurrency findings then listed about
    thirty cell names in one sentence. Up to NAMED_MAX are named, more are counted."""
    busy = "hosts A and B: other processes used 1.30 cores (limit 0.25 cores) during the cell"
    levels = {(ctx, conc): "ok" for ctx in ("short", "5k", "8k") for conc in (1, 2, 4)}
    links = ("base", "5gbe", "usb4")
    overlaps = {(link, ctx, conc): (0.5, 0.05) for link in links
                for ctx in ("short", "5k", "8k") for conc in (2, 4)}
    cells = summary_cells({link: levels for link in links}, overlaps)
    link_rows = pd.DataFrame([{"pair": "lab", "link": link, "a_to_b_gbps": 5.0,
                               "b_to_a_gbps": 5.0, "flags": None} for link in links])
    comp = comp_rows("usb4", [(0.70, 0.06)]).assign(flags=None, flags_base=None)

    every = _collect(cells.assign(flags=busy), comp, link_rows)
    boundary = next(f.markdown() for f in every if "Usable concurrency" in f.markdown())
    assert f"It rests on {len(cells)} cells, all flagged (the first: {busy})" in boundary
    assert "base short," not in boundary  # not a list of names

    some = cells["link"].eq("usb4") & cells["conc"].gt(1)
    part = _collect(cells.assign(flags=np.where(some, busy, None)), comp, link_rows)
    overlap = next(f.markdown() for f in part if "overlap" in f.markdown())
    assert f"It rests on {int(some.sum())} flagged cells of its {int(cells['conc'].gt(1).sum())}" \
        in overlap

    few = cells["link"].eq("usb4") & cells["ctx"].eq("short") & cells["conc"].gt(1)
    named = _collect(cells.assign(flags=np.where(few, busy, None)), comp, link_rows)
    overlap = next(f.markdown() for f in named if "overlap" in f.markdown())
    assert "It rests on flagged cells, usb4 short 2-way and usb4 short 4-way" in overlap


def test_a_value_that_rounds_to_zero_carries_no_sign():
    """The default run's overlap finding read "falls ... to -0.00 or less at 8k"."""
    assert finding_text.fixed(-0.004) == "0.00"
    assert finding_text.fixed(-0.006) == "-0.01"
    assert finding_text.fixed(0.53) == "0.53"


def test_counted_round_trips_at_the_floor_read_so_without_a_spread():
    """One cell counted exactly one turn per token (no ± from one cell): at the floor,
    not "-0.00 below" it; one counted below the floor says why a count can be."""
    trips = pd.DataFrame([{"pair": "rig", "model": "m", "workers": 1, "round_trips": 1.0,
                           "round_trips_se": np.nan,
                           "round_trips_from": "counted from the RPC packets"}])
    text = findings.round_trip_floor(trips, trips.iloc[0:0], "m").markdown()
    assert "(counted from the RPC packets; the floor is 1: at the floor)" in text, text
    low = findings.round_trip_floor(trips.assign(round_trips=0.9), trips.iloc[0:0], "m").markdown()
    assert "0.10 below the floor: fewer turns than tokens were counted" in low, low


def test_a_sweep_above_the_floor_whose_packets_count_the_floor_is_no_extra_transaction():
    """The lab's sweep read 1.07 ±0.03 where the same requests' packets counted 1.00
    turns: the finding may not call the 0.07 a transaction a protocol could save."""
    trips = pd.DataFrame([{"pair": "lab", "model": "m", "workers": 1, "round_trips": 1.07,
                           "round_trips_se": 0.015, "round_trips_from": "the delay sweep",
                           "turns_counted": 1.0}])
    text = findings.round_trip_floor(trips, trips.iloc[0:0], "m").markdown()
    assert "+0.07 above the floor: yet the packets count 1.00 turns per token" in text, text
    assert "could save" not in text
    more = findings.round_trip_floor(trips.assign(turns_counted=2.0), trips.iloc[0:0],
                                     "m").markdown()
    assert "blocking transactions a better protocol could save" in more


def test_the_extra_above_the_counted_turns_is_split_by_the_packets():
    """Split by the packets (sweep_fit): the turns' waits and host A's own time per ms of
    latency, both given, no place named (in the lab both grow a little, and which one
    resolves changes from run to run); without a split, the sentence as before."""
    trips = pd.DataFrame([{"pair": "lab", "model": "m", "workers": 1, "round_trips": 1.04,
                           "round_trips_se": 0.003, "round_trips_from": "the delay sweep",
                           "turns_counted": 1.0, "waits_per_latency": 1.01,
                           "waits_per_latency_se": 0.006, "a_time_per_latency": 0.03,
                           "a_time_per_latency_se": 0.008}])
    text = findings.round_trip_floor(trips, trips.iloc[0:0], "m").markdown()
    assert ("a cost each turn pays beyond the added latency: per ms of latency the turns' "
            "waits grew 1.01 ±0.01 ms a token and host A's own time outside them +0.03 "
            "±0.02 ms, from the packets)") in text, text
    unsplit = trips.assign(waits_per_latency=None)
    text = findings.round_trip_floor(unsplit, trips.iloc[0:0], "m").markdown()
    assert "a cost each turn pays beyond the added latency)" in text, text


def test_a_pair_of_one_link_predicts_the_seeds_links_from_its_own_figures():
    """One link (the LAN, say): nothing compared, and the seed's three links predicted
    from this run's step, round trips and bytes; a second link measured ends it."""
    model = pd.DataFrame([{
        "pair": "lab", "model": "m", "ctx": "short", "baseline": "lan", "decode_ms": 10.0,
        "decode_ms_se": 0.01, "round_trips": 1.0, "round_trips_se": 0.02,
        "round_trips_from": "counted from the RPC packets", "rtt_base_us": 400.0,
        "bytes_a_to_b": 4096.0, "bytes_b_to_a": 4096.0, "wire_base_ms": 0.0139,
        "compute_ms": 10.0 - 0.400 - 0.0139}])
    text = findings.one_link(model, "lan", "m").markdown()
    assert text.startswith("**One link measured (lan), so no link is compared with another**")
    # compute 9.5861 + 84 µs + 4096 B each way at 4.71 Gbit/s (0.0070 ms each): 9.684,
    # ± 2 x hypot(0.01, 0.02 x (400 - 84) µs) = 0.024
    assert "5GbE (84 µs, 4.71/4.71 Gbit/s) 9.68 ±0.02 ms/token (103.3 tok/s)" in text
    # + 224 µs + 4096 B at 4.38 (0.0075) and at 4.76 (0.0069): 9.825
    assert "USB4 (TB5 cable) (224 µs, 4.38/4.76 Gbit/s) 9.82 ±0.02 ms/token" in text
    assert "its 1.00 round trips" in text
    floor = model.assign(round_trips_from="assumed: the floor of one per RPC worker (1)")
    assert "its assumed 1.00 round trips" in findings.one_link(floor, "lan", "m").markdown()
    assert findings.one_link(model.iloc[0:0], "lan", "m") is None


def test_a_lan_link_says_so_in_its_finding():
    links = pd.DataFrame([{"pair": "rig", "link": "lan", "a_to_b_gbps": 0.94,
                           "b_to_a_gbps": 0.93, "lan_hosts": "A and B"},
                          {"pair": "rig", "link": "cable", "a_to_b_gbps": 9.4,
                           "b_to_a_gbps": 9.3, "lan_hosts": None}])
    (lan, _), (cable, _) = findings.link_facts(links, "lan")
    assert lan.markdown().startswith("**lan: 0.94 Gbit/s A→B and 0.93 B→A** (the LAN of hosts A "
                               "and B, compared as it is: nothing on it changed")
    assert "LAN" not in cable.markdown()


def test_a_tail_finding_held_to_the_baseline_links_cells_carries_their_flags():
    """A default run with a busy machine at 5k: the baseline's 5k cell ran under load, its
    p99 swelled, and every link 'narrowed the tail' there with no ⚠, because the finding
    carried only the link's own flags. Held to a cell, it carries that cell's flags; a
    paired context is held to the cell's own reference requests instead."""
    busy = "hosts A and B: other processes used 0.53 cores (limit 0.25 cores) during the cell"
    cells = pd.DataFrame([
        {"pair": "lab", "link": link, "model": "m", "ctx": ctx, "conc": conc,
         "flags": busy if (link, ctx) == ("base", "5k") else None}
        for link in ("base", "usb4") for ctx in ("short", "5k") for conc in (1, 2)])
    rows = pd.DataFrame([{"link": "usb4", "ctx": "short", "conc": 1, "paired": True,
                          "baseline": "base"},
                         {"link": "usb4", "ctx": "5k", "conc": 1, "paired": False,
                          "baseline": "base"}])
    flags = findings.flags_of(findings._tail_cells(cells, rows, "usb4"), ("flags",))
    assert flags == [("base 5k", busy)]
    # Paired at 5k too: the baseline's cells are not what it was held to.
    paired = findings._tail_cells(cells, rows.assign(paired=True), "usb4")
    assert findings.flags_of(paired, ("flags",)) == []


def test_the_token_times_check_names_its_first_cell_and_why():
    """A cell flagged for its token times says which kind of flag: tokens that share a
    read's stamp, or a client that disagrees with the server (not a shared stamp)."""
    summary = pd.DataFrame([
        {"pair": "lab", "model": "m", "link": "baseline", "ctx": "5k", "conc": 1, "status": "ok",
         "interference_checked": True, "interference": None,
         "timing": "client and server disagree on decode: request 2 -5.4% against the "
                   "server's own"},
        {"pair": "lab", "model": "m", "link": "usb4", "ctx": "short", "conc": 1, "status": "ok",
         "interference_checked": True, "interference": None, "timing": None}])
    lines = dict((text.split(":")[0], (state, text))
                 for state, text in checks.check_lines(summary, None))
    assert lines["token times"] == (
        "flagged", "token times: 1 of 2 cells flagged (⚠), the first baseline 5k x1: "
        "client and server disagree on decode: request 2 -5.4% against the server's own")
