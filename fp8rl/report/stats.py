"""Confidence intervals over seeds: the seed is the unit.

Every interval in the tables treats a seed (one run) as one observation. Eval scores have one value per
seed; a per-step metric (steps nested in seeds) is first reduced to each seed's mean over its steps
(`seed_means`: every seed weighs the same, whatever its number of steps), because the steps of one run
are correlated and pooling them would overstate the sample size. Then:

- one mean: Student t-interval over the n seed values, df = n - 1 (`t_interval`, `seed_interval`);
- Δ vs bf16: Welch's t-interval on the two sets of seed values (`welch_interval`, `seed_delta`). bf16
  and the variant are different runs; the report does not pair them by seed (a seed number fixes the
  data order and initial sampling, not a shared run), so the comparison is unpaired.

With three seeds this is the interval whose coverage holds: the t-interval is exact for normal seed
values, and a unit test (tests/unit/report/test_report_stats.py) simulates its coverage at n = 3 and
n = 5 with correlated steps nested in seeds. The hierarchical bootstrap over seeds × steps used before
covered 76-86 % at n = 3 and 84-91 % at n = 5 for a nominal 95 % in such simulations (at n = 3 its
intervals were 0.4× the t width): resampling 3 seeds cannot show the spread of a t with 2 df.

Ranges (`value_range`, `delta_range`, the single declaration of which metrics are proportions,
`is_proportion`): an interval of a proportion (accuracy, rate, clip fraction) is intersected with
[0, 1], that of a difference of proportions with [-1, 1], that of a non-negative metric with [0, ∞).
The true value lies in that range, so the cut never removes it: the coverage of the t-interval is kept
exactly, and the cell no longer shows impossible values. A t-interval on the logit of the seed means
would also stay inside [0, 1], but it is undefined for a seed mean of exactly 0 or 1 (a perfect eval
score, a run that never clipped) and targets a different quantity than the arithmetic mean the table
shows; hence the intersection.

With fewer than two seeds no interval exists: the bounds are NaN (a blank cell in the tables) and the
tables carry a note. Values that are NaN (a metric missing from a run) are left out before counting n.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from fp8rl.vocabulary import (
    ACC_MEAN,
    CLIP_HIGH_ALL,
    CLIP_HIGH_POS,
    CLIP_LOW_ALL,
    CLIP_LOW_NEG,
    GIBBERISH_RATE,
    MISMATCH_KL_K3,
    RESP_LEN_MEAN,
)

CONFIDENCE = 0.95
CI_METHOD = "95% CI: Student t-interval over seeds (scipy.stats.t, df = n-1)"
DELTA_METHOD = (
    "Δ vs bf16: difference of seed means, 95% CI by Welch's t-interval (unequal variances; unpaired: "
    "bf16 and the variant are different runs)"
)
SEED_MEAN_METHOD = (
    "Per-step metrics: the seed is the unit; each run's mean over its steps is one value, the estimate "
    "is the mean of those seed means and its 95% CI the Student t-interval over them (df = n-1); Δ vs "
    "bf16 by Welch's t on the seed means"
)
RANGE_METHOD = (
    "Intervals of proportions (accuracies, rates, clip fractions) are cut to [0, 1] (differences of "
    "proportions to [-1, 1], non-negative metrics to [0, ∞)): the true value lies there, so the cut keeps "
    "the t-interval's coverage; a logit-scale interval would fail on seed means of exactly 0 or 1"
)
NO_CI_NOTE = "n = 1 seed gives no interval: its bounds are left blank (NaN)"

# The single declaration of which metrics are proportions (fractions in [0, 1]): metrics.jsonl names
# (docs/architecture.md#metrics) and, for eval scores `{task}/{metric}`, the metric part (before any
# lm-eval `,filter`). avg@k is the mean of k scores of a proportion metric (fp8rl.evaluate.protocol).
PROPORTIONS = frozenset(
    {
        ACC_MEAN,
        GIBBERISH_RATE,
        CLIP_LOW_NEG,
        CLIP_HIGH_POS,
        "clip/dual",
        CLIP_LOW_ALL,
        CLIP_HIGH_ALL,
        "phantom/low_neg",
        "phantom/missed_neg",
        "tis/clipped",
        "tis/masked",
        "calib/target_q",
        "calib/target_q_high",
    }
)
EVAL_PROPORTIONS = frozenset(
    {
        "exact_match",
        "acc",
        "acc_norm",
        "accuracy",
        "ast_accuracy",
        "name_accuracy",
        "parse_rate",
        "math_verify",
    }
)
# metrics that cannot be negative (k3 = (r - 1) - log r >= 0 per token; entropy, lengths, KL penalty)
NONNEGATIVE = frozenset({"entropy", MISMATCH_KL_K3, RESP_LEN_MEAN, "loss/kl", "grad_norm"})
UNBOUNDED = (-math.inf, math.inf)


def is_proportion(name: str) -> bool:
    """Whether the metric `name` (a metrics.jsonl name or an eval score `{task}/{metric}`) is a
    proportion, per the declaration above."""
    if name in PROPORTIONS:
        return True
    if "/" not in name:
        return False
    metric = name.rsplit("/", 1)[1].split(",", 1)[0]
    return metric in EVAL_PROPORTIONS or metric.startswith("avg@")


def value_range(name: str) -> tuple[float, float]:
    """The range of a mean of metric `name`: [0, 1] for proportions, [0, inf) for non-negative metrics."""
    if is_proportion(name):
        return 0.0, 1.0
    return (0.0, math.inf) if name in NONNEGATIVE else UNBOUNDED


def delta_range(name: str) -> tuple[float, float]:
    """The range of a difference of two means of metric `name`: [-1, 1] for proportions."""
    return (-1.0, 1.0) if is_proportion(name) else UNBOUNDED


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


def _within(est: float, low: float, high: float, n: int, bounds: tuple[float, float] | None) -> Interval:
    """The interval intersected with `bounds` (NaN bounds stay NaN)."""
    if bounds is not None and not (math.isnan(low) or math.isnan(high)):
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return Interval(est, low, high, n)


def t_interval(
    values: Iterable[float], confidence: float = CONFIDENCE, *, bounds: tuple[float, float] | None = None
) -> Interval:
    """Mean of `values` with a two-sided Student t confidence interval (NaN bounds for n < 2),
    intersected with `bounds` when given (e.g. `value_range(metric)`)."""
    x = _clean(values)
    n = int(x.size)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    sem = float(x.std(ddof=1)) / math.sqrt(n)
    if sem == 0.0:
        return _within(mean, mean, mean, n, bounds)
    half = float(stats.t.ppf(0.5 + confidence / 2, df=n - 1)) * sem
    return _within(mean, mean - half, mean + half, n, bounds)


def welch_interval(
    values: Iterable[float],
    reference: Iterable[float],
    confidence: float = CONFIDENCE,
    *,
    bounds: tuple[float, float] | None = None,
) -> Interval:
    """mean(values) - mean(reference) with Welch's t-interval (Welch–Satterthwaite df), intersected
    with `bounds` when given (e.g. `delta_range(metric)`).

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
        return _within(diff, diff, diff, n, bounds)
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, df=df)) * se
    return _within(diff, diff - half, diff + half, n, bounds)


def seed_means(groups: Iterable[Iterable[float]]) -> np.ndarray:
    """Each seed's mean over its finite per-step values; seeds with none are dropped."""
    means = [g.mean() for g in (_clean(s) for s in groups) if g.size]
    return np.asarray(means, dtype=float)


def seed_interval(
    groups: Iterable[Iterable[float]],
    confidence: float = CONFIDENCE,
    *,
    bounds: tuple[float, float] | None = None,
) -> Interval:
    """Per-step metric, one sequence of per-step values per seed: the mean of the seed means with the
    t-interval over them (module docstring); `n` is the number of seeds with a finite value."""
    return t_interval(seed_means(groups), confidence, bounds=bounds)


def seed_delta(
    groups: Iterable[Iterable[float]],
    reference: Iterable[Iterable[float]],
    confidence: float = CONFIDENCE,
    *,
    bounds: tuple[float, float] | None = None,
) -> Interval:
    """(mean of the seed means of `groups`) - (that of `reference`) with Welch's t-interval on the two
    sets of seed means; `n` is the smaller seed count, bounds NaN unless both have two seeds."""
    return welch_interval(seed_means(groups), seed_means(reference), confidence, bounds=bounds)
