"""The power of the two tests studies plan with: Welch's t (simulated) and the paired t (exact)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from fp8rl.stats.welch import welch_ttest

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
    return float(np.mean(welch_ttest(a, b, axis=1).pvalue < alpha))


def paired_power(effect: float, sd: float, n: int, alpha: float) -> float:
    """Power of the two-sided paired t-test at level `alpha` over `n` pairs whose differences are
    normal with mean `effect` and SD `sd` (exact: the noncentral t). NaN for fewer than two pairs or no
    spread."""
    if n < 2 or not math.isfinite(sd) or sd <= 0.0:
        return math.nan
    df = n - 1
    crit = float(stats.t.ppf(1 - alpha / 2, df))
    nc = effect * math.sqrt(n) / sd
    # P(T > crit) + P(T < -crit), the lower tail as the upper tail of -T (noncentrality -nc): scipy's
    # nct.cdf far in the lower tail returns NaN for some inputs (df 2, crit 7.65, nc 8.92), its sf does not
    return float(stats.nct.sf(crit, df, nc) + stats.nct.sf(crit, df, -nc))
