"""Two independent samples: Welch's t-interval of the difference of their means and Welch's t-test.

`welch` and `welch_interval` are `scipy.stats.ttest_ind(..., equal_var=False)` and its
`confidence_interval` (Welch's t, two-sided p, Welch–Satterthwaite df). bf16 and a variant are different
runs; a seed number fixes the data order and initial sampling, not a shared run, so such a comparison is
unpaired.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from fp8rl.stats.intervals import CONFIDENCE, Interval, finite, sample_sd, within_bounds


@dataclass(frozen=True)
class Welch:
    """Welch's comparison of two samples: the difference of means with its interval (`delta`), and the
    test: t, two-sided p and the Welch–Satterthwaite df (NaN unless both samples have two values and
    some spread)."""

    delta: Interval
    t: float
    p: float
    df: float


def welch_ttest(a: np.ndarray, b: np.ndarray, axis: int = 0):
    """`scipy.stats.ttest_ind(a, b, equal_var=False)`. A group without spread (seeds that agree exactly,
    a simulated group of SD 0) is no loss of precision: scipy's warning that the values are nearly
    identical is silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        return stats.ttest_ind(a, b, axis=axis, equal_var=False)


def welch(
    values: Iterable[float],
    reference: Iterable[float],
    confidence: float = CONFIDENCE,
    *,
    bounds: tuple[float, float] | None = None,
) -> Welch:
    """mean(values) - mean(reference) with Welch's t-interval, intersected with `bounds` when given
    (e.g. `delta_range(metric)`), and Welch's t-test (`scipy.stats.ttest_ind`, unequal variances).

    The interval's `n` is the smaller of the two sample sizes; its bounds are NaN unless both have at
    least two values, and zero-width when neither has spread (then the test is NaN)."""
    a, b = finite(values), finite(reference)
    n = int(min(a.size, b.size))
    no_test = math.nan, math.nan, math.nan
    if n == 0:
        return Welch(Interval(math.nan, math.nan, math.nan, n), *no_test)
    diff = float(a.mean() - b.mean())
    if n < 2:
        return Welch(Interval(diff, math.nan, math.nan, n), *no_test)
    if sample_sd(a) == 0.0 and sample_sd(b) == 0.0:
        return Welch(within_bounds(diff, diff, diff, n, bounds), *no_test)
    res = welch_ttest(a, b)
    ci = res.confidence_interval(confidence)
    delta = within_bounds(diff, float(ci.low), float(ci.high), n, bounds)
    return Welch(delta, float(res.statistic), float(res.pvalue), float(res.df))


def welch_interval(
    values: Iterable[float],
    reference: Iterable[float],
    confidence: float = CONFIDENCE,
    *,
    bounds: tuple[float, float] | None = None,
) -> Interval:
    """The interval of `welch(values, reference, confidence, bounds=bounds)`."""
    return welch(values, reference, confidence, bounds=bounds).delta
