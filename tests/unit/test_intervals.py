"""The one meaning of ±: a 95% interval at the figure's own sample size."""

import numpy as np
import pytest

from splitbench.infra import intervals


def test_t_factor_follows_the_sample_size():
    # Student's t at 2.5% each side: 4.30 at n = 3 (2 dof), 2.26 at n = 10, 1.96 unbounded.
    assert intervals.t_factor(2) == pytest.approx(4.303, abs=1e-3)
    assert intervals.t_factor(9) == pytest.approx(2.262, abs=1e-3)
    assert intervals.t_factor(np.inf) == pytest.approx(1.960, abs=1e-3)
    assert np.isnan(intervals.t_factor(0))
    assert intervals.t_factor(np.array([2, 9])) == pytest.approx([4.303, 2.262], abs=1e-3)


def test_median_halfwidth_below_six_is_t_times_the_median_standard_error():
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    sd = np.std(values, ddof=1)
    expected = intervals.t_factor(4) * intervals.MEDIAN_SE * sd / np.sqrt(5)
    assert intervals.median_halfwidth(values) == pytest.approx(expected)
    assert np.isnan(intervals.median_halfwidth([1.0, np.nan]))


def test_median_ranks_are_scipy_quantile_tests():
    from scipy.stats import quantile_test

    for n in range(1, 60):
        ci = quantile_test(np.arange(1, n + 1)).confidence_interval(0.95)
        expected = None if np.isnan(ci.low) else (int(ci.low), int(ci.high))
        assert intervals.median_ranks(n) == expected, n


def test_median_halfwidth_from_six_is_half_the_order_statistic_interval():
    values = np.arange(20.0)[::-1]  # sorted inside: the 6th and 15th are 5 and 14
    assert intervals.median_halfwidth(values) == pytest.approx((14 - 5) / 2)


def test_one_stalled_sample_moves_a_median_by_one_rank_not_its_size():
    # A paired cell's 20 rounds, one whose request stalled (2 ms/token against 0.1):
    # the sd-based ± grew 30-fold, the interval's by one rank.
    rng = np.random.default_rng(11)
    rounds = rng.normal(0.1, 0.02, 20)
    stalled = np.append(rounds[:-1], 2.0)
    sd_based = intervals.t_factor(19) * intervals.MEDIAN_SE * np.std(stalled, ddof=1) / \
        np.sqrt(20)
    assert intervals.median_halfwidth(stalled) < 2 * intervals.median_halfwidth(rounds)
    assert sd_based > 10 * intervals.median_halfwidth(stalled)


def test_group_median_se_is_median_se_per_group():
    import pandas as pd

    frame = pd.DataFrame({"cell": ["a"] * 10 + ["b"] * 3 + ["c"],
                          "x": [*range(10), 1.0, 2.0, 4.0, 7.0]})
    got = intervals.group_median_se(frame.groupby("cell")["x"])
    assert got["a"] == pytest.approx(intervals.median_se(range(10))[0])
    assert got["b"] == pytest.approx(intervals.median_se([1.0, 2.0, 4.0])[0])
    assert np.isnan(got["c"])


def test_combined_degrees_of_freedom_are_welch_satterthwaite():
    se, dof = intervals.combined([1.0, 1.0], [4, 4])
    assert se == pytest.approx(np.sqrt(2))
    assert dof == pytest.approx(8.0)  # two equal variances: the dofs add
    # One term much larger than the other: its dof dominates.
    se, dof = intervals.combined([10.0, 0.1], [3, 100])
    assert dof == pytest.approx(3.0, rel=0.01)
    # A term of unbounded dof adds variance but no dof penalty.
    se, dof = intervals.combined([1.0, 1.0], [4, np.inf])
    assert dof == pytest.approx(16.0)
    se, dof = intervals.combined([np.array([1.0, 2.0])], [np.array([4, 9])])
    assert list(dof) == [4, 9]


@pytest.mark.parametrize("n", [5, 6, 10, 20])
@pytest.mark.parametrize("draw", ["normal", "stalls"])
def test_coverage_of_a_median_interval_is_near_95_percent(n: int, draw: str):
    # Normal samples, and samples where one in ten stalled (x4 and more): the
    # distribution-free interval holds its 95% either way (at 6 and 10 a little over:
    # the ranks' coverage is 96.9% and 97.9%); below 6 the sd-based one, wide there.
    rng = np.random.default_rng(3)
    samples = rng.normal(0.0, 1.0, size=(4000, n))
    if draw == "stalls":
        stalled = rng.random((4000, n)) < 0.1
        samples = np.where(stalled, 4 + rng.exponential(4.0, (4000, n)), samples)
    truth = 0.0 if draw == "normal" else float(np.median(
        np.where(rng.random(400_000) < 0.1, 4 + rng.exponential(4.0, 400_000),
                 rng.normal(0.0, 1.0, 400_000))))
    held = [abs(np.median(s) - truth) <= intervals.median_halfwidth(s) for s in samples]
    assert 0.93 <= np.mean(held) <= 0.99  # measured 0.945-0.983


def test_sd_upper_bounds_the_spread_from_above():
    # Chi-square at 9 dof: the 5% quantile is 3.325, so the bound is sd x sqrt(9/3.325).
    assert intervals.sd_upper(1.0, 10) == pytest.approx(np.sqrt(9 / 3.325), rel=1e-3)
    assert np.isnan(intervals.sd_upper(1.0, 1))
    rng = np.random.default_rng(5)
    sds = rng.normal(size=(4000, 10)).std(axis=1, ddof=1)
    covered = np.mean([intervals.sd_upper(s, 10) >= 1.0 for s in sds])
    assert covered == pytest.approx(0.95, abs=0.015)


def test_share_interval_is_clopper_pearson():
    low, high = intervals.share_interval(5, 5)
    assert low == pytest.approx(0.025 ** (1 / 5), abs=1e-6)  # 0.478
    assert high == 1.0
    low, high = intervals.share_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(1 - 0.025 ** (1 / 10), abs=1e-6)
    assert all(np.isnan(intervals.share_interval(0, 0)))


def test_requests_to_show_a_share():
    assert intervals.requests_to_show(0.9) == 36
    low, _ = intervals.share_interval(36, 36)
    assert low >= 0.9
    low, _ = intervals.share_interval(35, 35)
    assert low < 0.9


def test_every_quantile_is_scipy_stats_own():
    """intervals.py calls the scipy.special functions behind scipy.stats (lighter to
    import): each equal to scipy.stats' answer."""
    from scipy import stats

    for dof in (1, 2, 4, 9, 19, 80, np.inf):
        assert intervals.t_factor(dof) == pytest.approx(stats.t.ppf(0.975, dof), rel=1e-12)
    for n in (2, 6, 10, 40):
        assert intervals.sd_upper(1.0, n) == pytest.approx(
            np.sqrt((n - 1) / stats.chi2.ppf(0.05, n - 1)), rel=1e-12)
    for met, total in ((0, 6), (3, 6), (5, 6), (6, 6), (17, 20), (36, 36)):
        ci = stats.binomtest(met, total).proportion_ci(0.95, method="exact")
        assert intervals.share_interval(met, total) == pytest.approx((ci.low, ci.high),
                                                                     abs=1e-12)
    assert 2 * intervals.t_sf(2.0, 9) == pytest.approx(2 * stats.t.sf(2.0, 9), rel=1e-12)


def test_importing_the_rule_does_not_import_scipy_stats():
    import subprocess
    import sys

    code = ("import sys, splitbench.infra.intervals, splitbench.infra.precision; "
            "print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
