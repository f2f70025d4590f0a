"""Welch's unpaired t-test of two groups of per-seed values, its simulated power, and Holm's step-down
adjustment: the statistics of a study's planned contrasts when the run is the unit (fp8rl.report.planned;
the paired test over bases is fp8rl.report.paired)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats


def welch_test(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(t, two-sided p) of Welch's t-test of mean(a) − mean(b); NaN unless both have two values and a
    spread."""
    a, b = finite(a), finite(b)
    if a.size < 2 or b.size < 2:
        return math.nan, math.nan
    se2 = a.var(ddof=1) / a.size + b.var(ddof=1) / b.size
    if se2 == 0.0:
        return math.nan, math.nan
    res = stats.ttest_ind(a, b, equal_var=False)
    return float(res.statistic), float(res.pvalue)


def welch_df(sd_a: float, n_a: int, sd_b: float, n_b: int) -> float:
    """The Welch–Satterthwaite degrees of freedom."""
    va, vb = sd_a**2 / n_a, sd_b**2 / n_b
    if va + vb == 0.0:
        return math.nan
    return (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))


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
    va, vb = a.var(axis=1, ddof=1) / n_a, b.var(axis=1, ddof=1) / n_b
    t = (a.mean(axis=1) - b.mean(axis=1)) / np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
    return float(np.mean(np.abs(t) > stats.t.ppf(1 - alpha / 2, df)))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted in the family)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, math.nan)
    idx = [i for i in np.argsort(p, kind="stable") if math.isfinite(p[i])]
    m, running = len(idx), 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def finite(values: Sequence[float]) -> np.ndarray:
    """The finite values of `values` as a float array."""
    arr = np.asarray(list(values), dtype=float)
    return arr[np.isfinite(arr)]
