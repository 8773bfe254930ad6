"""What a link does to the tail of the token times (analysis/tail_shift.py): a shift of
every gap, or a wider distribution, with ±; and its finding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from splitbench import results
from splitbench.analysis import tail_shift
from tests.matrices import request
from tests.support import write_cell

RNG = np.random.default_rng(7)


def gaps(requests: int = 20, per: int = 60, base: float = 1.0) -> list[np.ndarray]:
    return [base + RNG.exponential(0.05, per) for _ in range(requests)]


def with_spikes(arrays: list[np.ndarray], every: int = 20, spike: float = 3.0
                ) -> list[np.ndarray]:
    """One gap in `every` `spike` ms longer: a link that stalls now and then."""
    out = []
    for a in arrays:
        a = a.copy()
        a[::every] += spike
        out.append(a)
    return out


def rows(own: list[np.ndarray], base: list[np.ndarray], ctx: str = "short") -> pd.Series:
    return pd.Series({"pair": "lab", "link": "usb4", "model": "m", "ctx": ctx, "conc": 1,
                      "baseline": "base", "paired": True, **tail_shift.shift(own, base)})


def test_a_link_that_adds_the_same_to_every_gap_shifts_without_jitter():
    base = gaps()
    row = rows([a + 0.5 for a in base], base)
    assert abs(row["p50_delta_ms"] - 0.5) < 0.01 and abs(row["p99_delta_ms"] - 0.5) < 0.01
    assert abs(row["widening_ms"]) <= row["widening_unc_ms"]
    found = tail_shift.finding(pd.DataFrame([row]), "usb4", "m")
    assert found.text.startswith("**usb4 shifts every gap between tokens alike at short: "
                                 "its median moves +0.50 ±0.0"), found.text
    assert "no added jitter" in found.text and "against its paired baseline" in found.text


def test_a_link_that_stalls_now_and_then_adds_jitter():
    base = gaps()
    row = rows(with_spikes([a + 0.5 for a in base]), base)
    assert row["widening_ms"] > row["widening_unc_ms"] > 0, row
    found = tail_shift.finding(pd.DataFrame([row]), "usb4", "m")
    assert found.text.startswith("**usb4 adds jitter at short: its median gap between "
                                 "tokens moves +0.5"), found.text


def test_a_run_of_many_comparisons_needs_a_wider_margin_before_it_calls_jitter():
    """Nine quiet comparisons at 2σ each would call jitter somewhere in a third of runs:
    the joint allowance holds them together, so a widening just past one comparison's
    ± stays 'no added jitter' in a run of nine, and is called in a run of one."""
    assert tail_shift.joint_sigmas(1) == 2.0
    assert 2.7 < tail_shift.joint_sigmas(9) < 2.9
    row = rows([a + 0.5 for a in gaps()], gaps()).copy()
    row["widening_unc_ms"], row["widening_ms"] = 0.20, 0.25
    alone = tail_shift.with_allowance(pd.DataFrame([row]))
    assert alone["comparisons"].iloc[0] == 1
    assert tail_shift.finding(alone, "usb4", "m").text.startswith("**usb4 adds jitter")
    nine = tail_shift.with_allowance(pd.DataFrame([row] * 9))
    assert nine["comparisons"].iloc[0] == 9
    assert nine["widening_allowance_ms"].iloc[0] > 0.25
    text = tail_shift.finding(nine.iloc[:1], "usb4", "m").text
    assert "no added jitter (the difference, +0.25 ±0.28 ms, is within its ±, which " \
        "holds the run's 9 such comparisons together)" in text, text
    # A p99 from too few gaps is not judged and does not widen the others' margin.
    few = pd.DataFrame([row, row.copy()])
    few.loc[1, "too_few"] = True
    assert tail_shift.with_allowance(few)["comparisons"].iloc[0] == 1


def test_too_few_gaps_for_a_p99_is_said_not_guessed():
    base = gaps(requests=2, per=20)
    row = rows(with_spikes([a + 0.5 for a in base]), base)
    assert row["too_few"]
    found = tail_shift.finding(pd.DataFrame([row]), "usb4", "m")
    assert found.text.startswith("**Whether usb4 widens the tail of token times is not "
                                 "resolvable on this data**: its single-stream cells hold "
                                 "at most 40 gaps"), found.text
    # One context resolvable, the next not: the headline at the first, the rest said.
    both = pd.DataFrame([rows([a + 0.5 for a in gaps()], gaps()),
                         rows([a + 0.5 for a in base], base, ctx="5k")])
    text = tail_shift.finding(both, "usb4", "m").text
    assert "At 5k its p99 rests on too few gaps (40)." in text, text
    # Short paired, 5k not: each said where it holds.
    mixed = tail_shift.finding(both.assign(paired=[True, False]), "usb4", "m").text
    assert "(against its paired baseline requests at short, the baseline link's cells " \
        "elsewhere)" in mixed, mixed


def write(root: Path, link: str, arrays: list[np.ndarray], reference: list[np.ndarray] = ()
          ) -> str:
    """A cell of `link` whose requests' tokens are `arrays[i]` ms apart (and paired
    reference requests after them)."""
    every = [(a, False) for a in arrays] + [(a, True) for a in reference]
    rows = [request(i, list(a), send_ns=i * 10**9, reference=ref)
            for i, (a, ref) in enumerate(every)]
    path = write_cell(root, link, "short", 1, rows)
    tokens = [{"request_id": i, "token_index": k,
               "t_ns": i * 10**9 + 10**7 + int(t * 1e6)}
              for i, (a, _) in enumerate(every) for k, t in enumerate(np.cumsum([0, *a]))]
    pd.DataFrame(tokens).to_parquet(results.tokens_of(path))
    return path


def test_a_paired_cell_is_held_to_its_own_reference_and_another_to_the_baselines_cell(
        tmp_path):
    base = gaps()
    paired = write(tmp_path / "p", "usb4", [a + 0.5 for a in base], reference=base)
    table = tail_shift.table([paired], "base")
    assert table.iloc[0]["paired"] and abs(table.iloc[0]["p50_delta_ms"] - 0.5) < 0.01
    # Not paired: the baseline link's own cell of the same model, context, concurrency.
    files = [write(tmp_path / "s", "usb4", [a + 0.2 for a in base]),
             write(tmp_path / "s", "base", base)]
    table = tail_shift.table(files, "base").set_index("link")
    assert list(table.index) == ["usb4"] and not table.loc["usb4", "paired"]
    assert abs(table.loc["usb4", "p50_delta_ms"] - 0.2) < 0.01
    # No baseline cell to hold it to: no row.
    assert tail_shift.table(files[:1], "base").empty
