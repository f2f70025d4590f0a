"""The report's statistics, in one module: intervals and tests over seeds, multiplicity, counts.

Every other module of the report calls these; where scipy has the method, it computes it.

The seed is the unit: every interval in the tables treats a seed (one run) as one observation. Eval
scores have one value per seed; a per-step metric (steps nested in seeds) is first reduced to each
seed's mean over its finite steps (`finite_mean`; endpoints.csv's per-run values, fp8rl.report.endpoints:
every seed weighs the same, whatever its number of steps), because the steps of one run are correlated
and pooling them would overstate the sample size. Then:

- one mean: Student t-interval over the n seed values, df = n - 1 (`t_interval`:
  `scipy.stats.t.interval` about the mean with the standard error `scipy.stats.sem`);
  `one_sample_p`: the two-sided one-sample t-test against 0 (`scipy.stats.ttest_1samp`), and
  `p_from_interval` that p recovered from a published 95 % interval;
- Δ vs bf16: Welch's t-interval on the two sets of seed values (`welch`, `welch_interval`:
  `scipy.stats.ttest_ind(..., equal_var=False)` and its `confidence_interval`, which
  also give Welch's t, two-sided p and Welch–Satterthwaite df). bf16 and the variant are different
  runs; the report does not pair them by seed (a seed number fixes the data order and initial sampling,
  not a shared run), so the comparison is unpaired. `welch_power` simulates that test's power;
- `holm`: Holm's step-down adjustment of a family of p-values (scipy has none); `fixed_sequence`: the
  adjusted p-values of fixed-sequence testing (hypotheses in an order set before the data, each tested
  at the full alpha only while every earlier one is rejected: the running maximum of the p-values);
- divergence counts (a run diverges or it does not; with 3 seeds per cell the counts are small, so
  every figure is exact, never a normal approximation): `clopper_pearson(k, n)`, the exact interval of
  a rate k/n (`scipy.stats.binomtest(k, n).proportion_ci(method="exact")`; it covers at least the
  nominal level for every true rate), and `fisher_p`, the two-sided Fisher exact test of two rates
  (`scipy.stats.fisher_exact`; with 3 runs each, 0/3 vs 3/3 gives p = 0.10: no pair of 3-run cells can
  differ at the 5 % level). The dose-response fit of those counts is fp8rl.report.binomial.

The one-sample interval is `t.interval` about the mean rather than `ttest_1samp(...).confidence_interval`
because the latter takes the standard error as sqrt(var / n), which differs from sd / sqrt(n) in the last
bit, and report.json carries the bf16 control's interval at full precision.

With three seeds the t-interval is the interval whose coverage holds: it is exact for normal seed
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
A sample without spread gets a zero-width interval and no test (NaN t, p and df). Spread below
`SPREAD_RTOL` of the sample's largest magnitude is float rounding, not spread (`sample_sd`): three seed
means of 0.1 computed from different numbers have an SD of about 1e-17, on which a t-test would report
p ~ 1e-31 and an interval that excludes 0 by nothing.
"""

from __future__ import annotations

import math
import warnings
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
BINOMIAL_METHOD = "exact Clopper-Pearson 95% interval of the fraction diverged"
FISHER_METHOD = "two-sided Fisher exact test of the diverged fractions (3 vs 3 runs: p >= 0.10 always)"

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
        "calib/floor_binds",
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
    x = finite(values)
    n = int(x.size)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    if sample_sd(x) == 0.0:
        return _within(mean, mean, mean, n, bounds)
    sem = float(stats.sem(x))
    low, high = stats.t.interval(confidence, n - 1, loc=mean, scale=sem)
    return _within(mean, float(low), float(high), n, bounds)


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


@dataclass(frozen=True)
class Welch:
    """Welch's comparison of two samples: the difference of means with its interval (`delta`), and the
    test: t, two-sided p and the Welch–Satterthwaite df (NaN unless both samples have two values and
    some spread)."""

    delta: Interval
    t: float
    p: float
    df: float


def _welch_ttest(a: np.ndarray, b: np.ndarray, axis: int = 0):
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
        return Welch(_within(diff, diff, diff, n, bounds), *no_test)
    res = _welch_ttest(a, b)
    ci = res.confidence_interval(confidence)
    delta = _within(diff, float(ci.low), float(ci.high), n, bounds)
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


POWER_DRAWS = 20_000
POWER_SEED = 20250126


def welch_power(
    effect: float,
    sd_a: float,
    n_a: int,
    sd_b: float,
    n_b: int,
    alpha: float,
    *,
    draws: int = POWER_DRAWS,
    seed: int = POWER_SEED,
) -> float:
    """Power of the two-sided Welch t-test at level `alpha` to detect a true difference `effect` between
    normal groups with SDs `sd_a`, `sd_b` and sizes `n_a`, `n_b`, by simulating the test itself (`draws`
    pairs of samples, seeded: the same inputs give the same power, to about ±0.007). Simulated because
    at 3-5 seeds the noncentral t with the expected Welch df overstates it (n = 3 per group, effect 3
    SDs: 0.78 against the test's 0.68); the Welch df of each draw varies. NaN for fewer than two per
    group or no spread."""
    if n_a < 2 or n_b < 2 or not (math.isfinite(sd_a) and math.isfinite(sd_b)) or sd_a + sd_b == 0.0:
        return math.nan
    rng = np.random.default_rng(seed)
    a = rng.normal(effect, sd_a, (draws, n_a)) if sd_a > 0 else np.full((draws, n_a), float(effect))
    b = rng.normal(0.0, sd_b, (draws, n_b)) if sd_b > 0 else np.zeros((draws, n_b))
    return float(np.mean(_welch_ttest(a, b, axis=1).pvalue < alpha))


def holm(pvalues: Iterable[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted in the family)."""
    p = np.asarray(list(pvalues), dtype=float)
    out = np.full(p.shape, math.nan)
    idx = [i for i in np.argsort(p, kind="stable") if math.isfinite(p[i])]
    m, running = len(idx), 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def fixed_sequence(pvalues: Iterable[float]) -> list[float]:
    """Fixed-sequence adjusted p-values, in the given order: the running maximum of the p-values, so a
    hypothesis is rejected at alpha exactly when it and every one before it have p < alpha (family-wise
    error at alpha, no split). A NaN (a contrast that could not be tested) ends the sequence: it and every
    later one stay NaN."""
    out, running = [], 0.0
    for p in pvalues:
        running = (
            math.nan if not math.isfinite(running) or not math.isfinite(p) else max(running, min(p, 1.0))
        )
        out.append(running)
    return out


ADJUSTMENTS = {"holm": holm, "fixed_sequence": fixed_sequence, "none": list}


def clopper_pearson(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided interval of a binomial proportion k/n (NaN for n = 0)."""
    if n == 0:
        return math.nan, math.nan
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def fisher_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided Fisher exact p-value of k1/n1 vs k2/n2 (NaN when a group is empty)."""
    if n1 == 0 or n2 == 0:
        return math.nan
    return float(stats.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]]).pvalue)
