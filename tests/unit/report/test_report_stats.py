"""Confidence intervals over seeds agree with scipy's own t-tests; n = 1 gives no interval; the
hierarchical bootstrap is deterministic, resamples seeds and steps, and agrees with a naive one."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fp8rl.report.stats import Interval, bootstrap_delta, bootstrap_interval, t_interval, welch_interval

SAMPLES = [
    [0.41, 0.47],
    [0.2, 0.35, 0.31],
    [1.0, 2.0, 3.5, 0.25, 7.0],
    list(np.random.default_rng(0).normal(0.5, 0.1, size=9)),
]


@pytest.mark.parametrize("x", SAMPLES)
@pytest.mark.parametrize("confidence", [0.95, 0.9])
def test_t_interval_matches_scipy_ttest_1samp(x, confidence):
    ci = t_interval(x, confidence)
    ref = stats.ttest_1samp(x, 0.0).confidence_interval(confidence)
    assert ci.estimate == pytest.approx(np.mean(x))
    assert (ci.low, ci.high) == pytest.approx((ref.low, ref.high), rel=1e-10)
    assert ci.n == len(x)


@pytest.mark.parametrize("a", SAMPLES)
@pytest.mark.parametrize("b", SAMPLES[1:])
def test_welch_interval_matches_scipy_ttest_ind(a, b):
    d = welch_interval(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert d.estimate == pytest.approx(np.mean(a) - np.mean(b))
    assert (d.low, d.high) == pytest.approx((ref.low, ref.high), rel=1e-10)


def test_one_seed_gives_an_estimate_without_interval():
    ci = t_interval([0.42])
    assert ci.estimate == 0.42 and ci.n == 1 and not ci.has_ci
    assert math.isnan(ci.low) and math.isnan(ci.high)
    d = welch_interval([0.42], [0.3, 0.5])
    assert d.estimate == pytest.approx(0.02) and not d.has_ci


def test_nan_values_are_left_out_before_counting():
    ci = t_interval([0.3, float("nan"), 0.5, float("inf")])
    ref = stats.ttest_1samp([0.3, 0.5], 0.0).confidence_interval(0.95)
    assert ci.n == 2 and (ci.low, ci.high) == pytest.approx((ref.low, ref.high))
    assert t_interval([]).n == 0 and math.isnan(t_interval([]).estimate)
    assert math.isnan(welch_interval([], [1.0, 2.0]).estimate)


def test_identical_seeds_give_a_zero_width_interval():
    ci = t_interval([0.5, 0.5, 0.5])
    assert (ci.low, ci.estimate, ci.high) == (0.5, 0.5, 0.5)


def _naive_bootstrap(groups, replicates, rng):
    """Reference hierarchical bootstrap, one replicate at a time."""
    out = []
    for _ in range(replicates):
        seeds = rng.integers(0, len(groups), size=len(groups))
        out.append(np.mean([np.mean(rng.choice(groups[s], size=len(groups[s]))) for s in seeds]))
    return np.array(out)


def test_bootstrap_estimate_is_the_mean_of_seed_means_and_is_deterministic():
    groups = [[0.01, 0.02, 0.03], [0.05, 0.04], [0.02, 0.02, 0.03, 0.01]]
    ci = bootstrap_interval(groups)
    assert ci.estimate == pytest.approx(np.mean([np.mean(g) for g in groups]))
    assert ci.n == 3 and ci.low < ci.estimate < ci.high
    assert bootstrap_interval(groups) == ci  # seeded: the same data give the same interval
    assert bootstrap_interval([[0.5, 0.5], [0.5, 0.5, 0.5]]) == Interval(0.5, 0.5, 0.5, 2)


def test_bootstrap_spread_agrees_with_a_naive_hierarchical_bootstrap():
    rng = np.random.default_rng(1)
    groups = [list(rng.normal(mu, 0.02, size=n)) for mu, n in ((0.1, 12), (0.14, 12), (0.09, 10), (0.12, 12))]
    ci = bootstrap_interval(groups, replicates=4000)
    ref = np.quantile(_naive_bootstrap([np.array(g) for g in groups], 4000, rng), [0.025, 0.975])
    width, ref_width = ci.high - ci.low, ref[1] - ref[0]
    assert width == pytest.approx(ref_width, rel=0.15)


def test_bootstrap_resamples_seeds_not_only_steps():
    """Constant steps within each seed: all the spread is between seeds, and the interval shows it."""
    groups = [[0.1] * 20, [0.2] * 20, [0.3] * 20]
    ci = bootstrap_interval(groups)
    assert ci.high - ci.low > 0.1
    within = bootstrap_interval([[0.1, 0.3] * 10, [0.1, 0.3] * 10])  # spread within seeds only
    assert within.low < 0.2 < within.high


def test_bootstrap_one_seed_or_none_gives_no_interval_and_drops_nan():
    one = bootstrap_interval([[0.1, 0.2, float("nan")]])
    assert one.estimate == pytest.approx(0.15) and one.n == 1 and not one.has_ci
    assert bootstrap_interval([]).n == 0 and math.isnan(bootstrap_interval([[float("nan")]]).estimate)
    assert not bootstrap_delta([[0.1], [0.2]], [[0.1]]).has_ci


def test_bootstrap_delta_is_the_difference_with_an_interval_excluding_zero_when_clear():
    a = [[0.05, 0.052, 0.049], [0.051, 0.05], [0.048, 0.05, 0.051]]
    b = [[0.01, 0.012], [0.011, 0.009, 0.01], [0.012, 0.01]]
    d = bootstrap_delta(a, b)
    assert d.estimate == pytest.approx(np.mean([np.mean(g) for g in a]) - np.mean([np.mean(g) for g in b]))
    assert 0 < d.low < d.estimate < d.high and d.n == 3
    same = bootstrap_delta(a, a)
    assert same.estimate == 0 and same.low < 0 < same.high
