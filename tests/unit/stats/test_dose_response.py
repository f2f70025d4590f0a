"""Divergence counts: exact intervals agree with scipy, Fisher's test of 0/3 vs 3/3 is p = 0.1, and the
logistic ED50 fit recovers hand-made dose tables, separation included, without crashing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from fp8rl.stats.dose_response import _loglik, _profile, dose_response
from fp8rl.stats.exact import clopper_pearson, fisher_p

CHI2 = stats.chi2.ppf(0.95, 1)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 12])
def test_clopper_pearson_matches_scipy_binomtest(n):
    for k in range(n + 1):
        ref = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert clopper_pearson(k, n) == pytest.approx((ref.low, ref.high), abs=1e-9)
    assert clopper_pearson(0, 3) == pytest.approx((0.0, 1 - 0.025 ** (1 / 3)))  # 0/3: [0, 0.708]
    assert all(math.isnan(v) for v in clopper_pearson(0, 0))


def test_fisher_exact_of_three_runs_each():
    assert fisher_p(0, 3, 3, 3) == pytest.approx(0.1)  # the most different 3-run cells: not < 0.05
    assert fisher_p(1, 3, 2, 3) == pytest.approx(1.0)
    assert fisher_p(0, 6, 6, 6) == pytest.approx(stats.fisher_exact([[0, 6], [6, 0]]).pvalue)
    assert fisher_p(0, 6, 6, 6) < 0.01
    assert math.isnan(fisher_p(1, 3, 0, 0))


def test_logistic_ed50_with_overlapping_outcomes_is_the_mle_and_a_profile_interval():
    doses, k, n = [1, 2, 4, 8, 16], [0, 1, 3, 4, 6], [6, 6, 6, 6, 6]
    fit = dose_response(doses, k, n)
    x = np.log2(doses)
    # the maximum-likelihood fit of logit P = a + b log2(dose), independently
    nll = lambda t: -_loglik(x, np.array(k, float), np.array(n, float), -t[0] / t[1], t[1])  # noqa: E731
    a, b = optimize.minimize(
        nll, [-2.0, 1.0], method="Nelder-Mead", options={"xatol": 1e-9, "fatol": 1e-12}
    ).x
    assert fit.fit == "logistic" and fit.slope == pytest.approx(b, rel=1e-3)
    assert fit.ed50 == pytest.approx(2 ** (-a / b), rel=1e-3) and 4 < fit.ed50 < 5
    # the bounds are where the profile deviance reaches the chi-square(1) 95% quantile
    kf, nf = np.array(k, float), np.array(n, float)
    top = _loglik(x, kf, nf, math.log2(fit.ed50), fit.slope)
    for bound in (fit.low, fit.high):
        assert 2 * (top - _profile(x, kf, nf, math.log2(bound))) == pytest.approx(CHI2, abs=1e-3)
    assert 1 < fit.low < fit.ed50 < fit.high < 16


def test_quasi_complete_separation_is_the_published_stress_tier():
    """0/3, 0/3, 1/3, 3/3 at doses 1-8: no run diverged below 4, all above it; the MLE slope is infinite
    and the ED50 tends to 4, with a bounded profile interval."""
    fp8 = dose_response([1, 2, 4, 8], [0, 0, 1, 3], [3, 3, 3, 3])
    assert fp8.fit == "quasi-complete separation" and fp8.ed50 == 4.0 and fp8.slope == math.inf
    assert 2.5 < fp8.low < 4 < fp8.high < 8
    calib = dose_response([1, 2, 4, 8], [0, 0, 2, 3], [3, 3, 3, 3])
    assert calib.ed50 == 4.0 and 2 < calib.low < 4 < calib.high < fp8.high
    assert "separation" in fp8.note and "unbounded" in fp8.note  # the slope; the table says so


def test_complete_separation_and_one_sided_cases_do_not_crash():
    gap = dose_response([1, 2, 4, 8], [0, 0, 0, 3], [3, 3, 3, 3])
    assert gap.fit == "complete separation" and math.isnan(gap.ed50)
    assert 4 <= gap.low < 4.1 and 7.9 < gap.high <= 8  # the interval spans the gap, no point estimate
    none = dose_response([1, 2, 4], [0, 0, 0], [3, 3, 3])
    assert none.fit == "none diverged" and math.isnan(none.ed50) and none.high == math.inf and none.low >= 4
    assert "one-sided" in none.note
    every = dose_response([2, 4, 8], [2, 3, 3], [2, 3, 3])
    assert every.fit == "all diverged" and every.low == 0.0 and 2 < every.high < 4  # 2 runs at dose 2
    one_run = dose_response([1, 2, 4, 8], [0, 0, 1, 1], [1, 1, 1, 1])  # few runs: wide, open on one side
    assert one_run.low < 4 and one_run.fit == "complete separation"
    flat = dose_response([1, 2, 4], [2, 1, 0], [3, 3, 3])
    assert (
        flat.fit == "no dose response" and math.isnan(flat.ed50) and (flat.low, flat.high) == (0.0, math.inf)
    )
    single = dose_response([4, 4], [1, 2], [3, 3])
    assert single.fit == "single dose" and math.isnan(single.low)
