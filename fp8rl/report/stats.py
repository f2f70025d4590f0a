"""Confidence intervals over seeds: Student t for one mean, Welch t for a difference of means.

The report says which interval it uses (`CI_METHOD`, `DELTA_METHOD`). With fewer than two seeds a
t-interval does not exist: the bounds are NaN (a blank cell in the tables) and the tables carry a note.
Values that are NaN (a metric missing from a run) are left out before counting n.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
CI_METHOD = "95% CI: Student t-interval over seeds (scipy.stats.t, df = n-1)"
DELTA_METHOD = "Δ vs bf16: difference of seed means, 95% CI by Welch's t-interval (unequal variances)"
NO_CI_NOTE = "n = 1 seed gives no interval: its bounds are left blank (NaN)"


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


def _clean(values: Iterable[float]) -> np.ndarray:
    arr = np.asarray(list(values), dtype=float)
    return arr[np.isfinite(arr)]


def t_interval(values: Iterable[float], confidence: float = CONFIDENCE) -> Interval:
    """Mean of `values` with a two-sided Student t confidence interval (NaN bounds for n < 2)."""
    x = _clean(values)
    n = int(x.size)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    sem = float(x.std(ddof=1)) / math.sqrt(n)
    if sem == 0.0:
        return Interval(mean, mean, mean, n)
    half = float(stats.t.ppf(0.5 + confidence / 2, df=n - 1)) * sem
    return Interval(mean, mean - half, mean + half, n)


def welch_interval(
    values: Iterable[float], reference: Iterable[float], confidence: float = CONFIDENCE
) -> Interval:
    """mean(values) - mean(reference) with Welch's t-interval (Welch–Satterthwaite df).

    `n` is the smaller of the two sample sizes; bounds are NaN unless both have at least two values.
    """
    a, b = _clean(values), _clean(reference)
    if a.size == 0 or b.size == 0:
        return Interval(math.nan, math.nan, math.nan, int(min(a.size, b.size)))
    diff = float(a.mean() - b.mean())
    n = int(min(a.size, b.size))
    if n < 2:
        return Interval(diff, math.nan, math.nan, n)
    va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    se = math.sqrt(va + vb)
    if se == 0.0:
        return Interval(diff, diff, diff, n)
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, df=df)) * se
    return Interval(diff, diff - half, diff + half, n)
