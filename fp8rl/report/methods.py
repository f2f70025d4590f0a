"""What the report's tables say of their statistics: the method notes they print, and the range each
metric's interval is cut to.

The statistics themselves are fp8rl.stats. Ranges (`value_range`, `delta_range`, the single declaration
of which metrics are proportions, `is_proportion`): an interval of a proportion (accuracy, rate, clip
fraction) is intersected with [0, 1], that of a difference of proportions with [-1, 1], that of a
non-negative metric with [0, ∞). The true value lies in that range, so the cut never removes it: the
coverage of the t-interval is kept exactly, and the cell no longer shows impossible values. A
t-interval on the logit of the seed means would also stay inside [0, 1], but it is undefined for a seed
mean of exactly 0 or 1 (a perfect eval score, a run that never clipped) and targets a different quantity
than the arithmetic mean the table shows; hence the intersection.
"""

from __future__ import annotations

import math

from fp8rl.vocabulary import (
    ACC_MEAN,
    CLIP_HIGH_ALL,
    CLIP_HIGH_POS,
    CLIP_LOW_ALL,
    CLIP_LOW_NEG,
    GIBBERISH_RATE,
    HELDOUT_METRICS,
    MISMATCH_KL_K3,
    RESP_LEN_MEAN,
)

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
        *HELDOUT_METRICS,  # `heldout/{metric}`: means of a 0/1 verifier reward or format check
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
