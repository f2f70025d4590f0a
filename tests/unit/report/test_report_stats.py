"""Confidence intervals over seeds agree with scipy's own t-tests; n = 1 gives no interval."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fp8rl.report.stats import t_interval, welch_interval

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
