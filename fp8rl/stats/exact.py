"""Exact figures of counts: the Clopper-Pearson interval of a rate and Fisher's test of two rates.

A run diverges or it does not; with a few runs per cell the counts are small, so every figure is exact,
never a normal approximation. `clopper_pearson(k, n)` is
`scipy.stats.binomtest(k, n).proportion_ci(method="exact")`: it covers at least the nominal level for
every true rate. `fisher_p` is `scipy.stats.fisher_exact`, two-sided; with 3 runs each, 0/3 vs 3/3 gives
p = 0.10, so no pair of 3-run cells can differ at the 5 % level.
"""

from __future__ import annotations

import math

from scipy import stats

from fp8rl.stats.intervals import CONFIDENCE


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
