"""Confidence intervals: Student t for one mean over seeds, Welch t for a difference of means, and a
hierarchical bootstrap for per-step metrics (steps nested in seeds).

The report says which interval it uses (`CI_METHOD`, `DELTA_METHOD`, `BOOTSTRAP_METHOD`). With fewer
than two seeds neither interval exists: the bounds are NaN (a blank cell in the tables) and the tables
carry a note. Values that are NaN (a metric missing from a run) are left out before counting n.

The bootstrap (`bootstrap_interval`, `bootstrap_delta`) takes one array of per-step values per seed. Its
estimate is the mean over seeds of each seed's mean over steps (every seed weighs the same, like the
seed means of the t-intervals). One replicate resamples the seeds with replacement, then, for each seed
drawn, that seed's steps with replacement, and takes the same mean of means; the interval is the 2.5 and
97.5 percentiles of `BOOTSTRAP_REPLICATES` replicates (the percentile method). Both levels are resampled
because the steps of one run are correlated: steps alone would understate the seed-to-seed spread. The
generator is seeded (`BOOTSTRAP_SEED`), so the same data always give the same interval.
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
BOOTSTRAP_REPLICATES = 2000
BOOTSTRAP_SEED = 20250101
BOOTSTRAP_METHOD = (
    "Per-step metrics: estimate = mean over seeds of each run's mean over steps; 95% CI by a "
    f"hierarchical percentile bootstrap ({BOOTSTRAP_REPLICATES} replicates, seeded): resample seeds with "
    "replacement, then steps within each drawn seed; Δ vs bf16 resamples both variants independently"
)


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


def _per_seed(groups: Iterable[Iterable[float]]) -> list[np.ndarray]:
    """The finite values of each seed; seeds with none are dropped."""
    out = [_clean(g) for g in groups]
    return [g for g in out if g.size]


def _replicates(seeds: list[np.ndarray], rng: np.random.Generator, replicates: int) -> np.ndarray:
    """`replicates` hierarchical bootstrap means of means: seeds, then steps within each drawn seed."""
    k = len(seeds)
    lengths = np.array([g.size for g in seeds])
    padded = np.zeros((k, int(lengths.max())))
    for i, g in enumerate(seeds):
        padded[i, : g.size] = g
    cols = np.arange(padded.shape[1])
    total = np.zeros(replicates)
    for _ in range(k):  # one slot of the seed resample at a time: each drawn seed gets its own steps
        seed = rng.integers(0, k, size=replicates)
        n = lengths[seed][:, None]
        steps = np.floor(rng.random((replicates, padded.shape[1])) * n).astype(int)
        use = cols[None, :] < n
        total += np.where(use, padded[seed[:, None], steps], 0.0).sum(axis=1) / lengths[seed]
    return total / k


def _mean_of_means(seeds: list[np.ndarray]) -> float:
    return float(np.mean([g.mean() for g in seeds]))


def bootstrap_interval(
    groups: Iterable[Iterable[float]],
    confidence: float = CONFIDENCE,
    *,
    replicates: int = BOOTSTRAP_REPLICATES,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """Mean over seeds of per-step means with a hierarchical bootstrap interval (module docstring).

    `groups` holds one sequence of per-step values per seed; `n` is the number of seeds with a finite
    value. Bounds are NaN for fewer than two seeds.
    """
    seeds = _per_seed(groups)
    if not seeds:
        return Interval(math.nan, math.nan, math.nan, 0)
    est = _mean_of_means(seeds)
    if len(seeds) < 2:
        return Interval(est, math.nan, math.nan, len(seeds))
    reps = _replicates(seeds, np.random.default_rng(seed), replicates)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(reps, [alpha, 1 - alpha])
    return Interval(est, float(low), float(high), len(seeds))


def bootstrap_delta(
    groups: Iterable[Iterable[float]],
    reference: Iterable[Iterable[float]],
    confidence: float = CONFIDENCE,
    *,
    replicates: int = BOOTSTRAP_REPLICATES,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """(mean of means of `groups`) - (that of `reference`), each resampled independently as in
    `bootstrap_interval`; `n` is the smaller seed count, bounds NaN unless both have two seeds."""
    a, b = _per_seed(groups), _per_seed(reference)
    n = min(len(a), len(b))
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    est = _mean_of_means(a) - _mean_of_means(b)
    if n < 2:
        return Interval(est, math.nan, math.nan, n)
    rng = np.random.default_rng(seed)
    reps = _replicates(a, rng, replicates) - _replicates(b, rng, replicates)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(reps, [alpha, 1 - alpha])
    return Interval(est, float(low), float(high), n)
