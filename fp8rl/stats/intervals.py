"""One mean over seeds: its Student t-interval, its one-sample test, and the spread that is not rounding.

The seed (or base) is the unit: each value is one run's (or one base's) endpoint. `t_interval` is
`scipy.stats.t.interval` about the mean with the standard error `scipy.stats.sem`, rather than
`ttest_1samp(...).confidence_interval`, because the latter takes the standard error as sqrt(var / n),
which differs from sd / sqrt(n) in the last bit, and report.json carries the bf16 control's interval at
full precision. With fewer than two values no interval exists: the bounds are NaN. Values that are NaN
(a metric missing from a run) are left out before counting n. A sample without spread gets a zero-width
interval and no test. Spread below `SPREAD_RTOL` of the sample's largest magnitude is float rounding,
not spread (`sample_sd`): three seed means of 0.1 computed from different numbers have an SD of about
1e-17, on which a t-test would report p ~ 1e-31 and an interval that excludes 0 by nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence bounds; `low`/`high` are NaN when no interval exists."""

    estimate: float
    low: float
    high: float
    n: int

    @property
    def has_ci(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))


def finite(values: Iterable[float]) -> np.ndarray:
    """The finite values, as a float array."""
    arr = np.asarray(list(values), dtype=float)
    return arr[np.isfinite(arr)]


def finite_mean(values: Iterable[float]) -> float:
    """The mean of the finite values; NaN when there is none."""
    arr = finite(values)
    return float(arr.mean()) if arr.size else math.nan


# An SD below this fraction of a sample's largest magnitude is float rounding, not spread.
SPREAD_RTOL = 1e-9


def sample_sd(values: Iterable[float]) -> float:
    """The sample SD (ddof 1) of the finite values; 0.0 when it is below `SPREAD_RTOL` times their
    largest magnitude (values that differ only by float rounding); NaN for fewer than two values."""
    x = finite(values)
    if x.size < 2:
        return math.nan
    sd = float(x.std(ddof=1))
    return 0.0 if sd <= SPREAD_RTOL * float(np.abs(x).max()) else sd


def within_bounds(
    est: float, low: float, high: float, n: int, bounds: tuple[float, float] | None
) -> Interval:
    """The interval intersected with `bounds` (NaN bounds stay NaN)."""
    if bounds is not None and not (math.isnan(low) or math.isnan(high)):
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return Interval(est, low, high, n)


def t_interval(
    values: Iterable[float], confidence: float = CONFIDENCE, *, bounds: tuple[float, float] | None = None
) -> Interval:
    """Mean of `values` with a two-sided Student t confidence interval (NaN bounds for n < 2),
    intersected with `bounds` when given (e.g. `value_range(metric)`)."""
    x = finite(values)
    n = int(x.size)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    if sample_sd(x) == 0.0:
        return within_bounds(mean, mean, mean, n, bounds)
    sem = float(stats.sem(x))
    low, high = stats.t.interval(confidence, n - 1, loc=mean, scale=sem)
    return within_bounds(mean, float(low), float(high), n, bounds)


def one_sample_p(values: Iterable[float]) -> float:
    """Two-sided p of the one-sample t-test of mean(values) = 0; NaN for fewer than two values or none
    of spread."""
    x = finite(values)
    if x.size < 2 or sample_sd(x) == 0.0:
        return math.nan
    return float(stats.ttest_1samp(x, 0.0).pvalue)


def p_from_interval(est: float, low: float, high: float, n: int) -> float:
    """The two-sided p of the one-sample t-test whose 95 % interval over `n` values is [low, high]
    (for tables that publish the interval but not the p)."""
    if n < 2 or not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return math.nan
    se = (high - low) / (2 * stats.t.ppf(0.975, n - 1))
    return float(2 * stats.t.sf(abs(est) / se, n - 1))
