"""Divergence counts against a dose: a logistic dose-response fit with a profile-likelihood interval.

A run diverges or it does not; with 3 seeds per cell the counts are small, so the fit is likelihood-based,
never a normal approximation (the exact interval of one count and Fisher's test of two are in
fp8rl.stats.exact):

- `dose_response(doses, k, n)`: a logistic fit over every run of a variant, P(diverge) =
  1 / (1 + exp(-b (log2 dose - log2 ED50))), slope b >= 0 (divergence does not fall with the dose), by
  maximum likelihood, and a profile-likelihood 95 % interval for the ED50, the dose at which half the
  runs diverge: the doses whose profile deviance 2 (l_max - max_b l(ED50, b)) is at most the
  chi-square(1) 95 % quantile. The profile interval stays defined where the maximum-likelihood slope is
  infinite (separation), where a delta-method interval (which needs a finite slope and its variance)
  does not exist:
  - quasi-complete separation (runs below one dose never diverge, runs above it always do, both
    outcomes at that dose): the slope is unbounded, the likelihood's supremum is reached as the ED50
    tends to that dose, which is the estimate;
  - complete separation (no run up to dose a diverged, every run from dose b did): no point estimate,
    the interval is (about) [a, b];
  - no run diverged (all did): the ED50 lies above (below) the doses run, the interval is one-sided;
  - a side whose deviance stays below the threshold over `PAD` doublings past the doses run is reported
    unbounded (dose 0 or inf).
  `fit` names the case and `note` says it in words, for the tables. With as few runs as the stress tier
  has the chi-square calibration is rough: enumerating every outcome of 4 doses (1, 2, 4, 8) × 3 runs,
  the interval covered the true ED50 with probability 0.88-1.00 for true ED50s of 2.8-7.5 and slopes of
  1-10 logit per doubling (lowest at slopes of 1-2 with the ED50 near the ends of the doses run).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from fp8rl.stats.intervals import CONFIDENCE

PAD = 8.0  # doublings past the doses run that the profile is searched over
GRID_STEP = 0.1  # log2 dose; the edges are refined by root finding
MAX_SLOPE = 200.0  # logit per doubling: stands in for an infinite slope under separation
MIN_SLOPE = 1e-6  # a fitted slope at or below this is no dose response
ED50_METHOD = (
    "ED50 (the dose at which half the runs diverge): logistic fit of divergence on log2(dose) over every "
    "run of the variant (maximum likelihood, slope >= 0), 95% interval by profile likelihood "
    "(chi-square 1 df); `fit` says where the data separate (unbounded slope) or leave a side unbounded"
)


@dataclass(frozen=True)
class DoseResponse:
    """ED50 (a dose) with its interval; `ed50` NaN where no point estimate exists, `low` 0 and `high`
    inf where a side is unbounded; `slope` in logit per doubling (inf under separation)."""

    ed50: float
    low: float
    high: float
    slope: float
    fit: str
    note: str


def _loglik(x: np.ndarray, k: np.ndarray, n: np.ndarray, x50: float, b: float) -> float:
    z = b * (x - x50)
    return float(-(k * np.logaddexp(0.0, -z) + (n - k) * np.logaddexp(0.0, z)).sum())


def _profile(x, k, n, x50: float) -> float:
    """max over 0 <= b <= MAX_SLOPE of the log-likelihood at this ED50 (log2 dose); concave in b."""
    res = optimize.minimize_scalar(
        lambda b: -_loglik(x, k, n, x50, b),
        bounds=(0.0, MAX_SLOPE),
        method="bounded",
        options={"xatol": 1e-7},
    )
    return max(-float(res.fun), _loglik(x, k, n, x50, MAX_SLOPE), _loglik(x, k, n, x50, 0.0))


def _binary_loglik(k: np.ndarray, n: np.ndarray) -> float:
    """log-likelihood of each dose fitted by its own fraction (0 where the fraction is 0 or 1)."""
    p = k / n
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(k > 0, k * np.log(p), 0.0) + np.where(n > k, (n - k) * np.log1p(-p), 0.0)
    return float(terms.sum())


def _mle(x, k, n) -> tuple[float, float] | None:
    """Unconstrained maximum-likelihood (intercept, slope) of logit P = a + b x; data overlap."""

    def nll(theta):
        z = theta[0] + theta[1] * x
        return float((k * np.logaddexp(0.0, -z) + (n - k) * np.logaddexp(0.0, z)).sum())

    def grad(theta):
        p = 1.0 / (1.0 + np.exp(-(theta[0] + theta[1] * x)))
        r = n * p - k
        return np.array([r.sum(), (r * x).sum()])

    res = optimize.minimize(nll, np.zeros(2), jac=grad, method="BFGS", options={"gtol": 1e-10})
    return (float(res.x[0]), float(res.x[1])) if np.all(np.isfinite(res.x)) else None


def _fmt_dose(x: float) -> str:
    return f"{2.0**x:.3g}"


def _case(x, k, n) -> tuple[str, float, float, float, str]:
    """(fit, sup of the log-likelihood over ED50 and slope >= 0, ED50 estimate in log2 dose or NaN,
    slope, note) by the shape of the data."""
    survived, diverged = x[k < n], x[k > 0]
    if not diverged.size:
        return "none diverged", 0.0, math.nan, math.inf, "no run diverged, no point estimate"
    if not survived.size:
        return "all diverged", 0.0, math.nan, math.inf, "every run diverged, no point estimate"
    last_ok, first_div = float(survived.max()), float(diverged.min())
    if last_ok < first_div:
        note = (
            f"complete separation: no run diverged up to dose {_fmt_dose(last_ok)}, every run from dose "
            f"{_fmt_dose(first_div)} did; slope unbounded, no point estimate"
        )
        return "complete separation", 0.0, math.nan, math.inf, note
    if last_ok == first_div:
        at = x == last_ok
        note = (
            f"quasi-complete separation: no run diverged below dose {_fmt_dose(last_ok)}, every run above it "
            f"did; slope unbounded, the estimate is the ED50's limit, that dose"
        )
        return "quasi-complete separation", _binary_loglik(k[at], n[at]), last_ok, math.inf, note
    theta = _mle(x, k, n)
    if theta is None or theta[1] <= MIN_SLOPE:
        return "no dose response", math.nan, math.nan, 0.0, "the fitted slope is not positive: no ED50"
    a, b = theta
    return (
        "logistic",
        _loglik(x, k, n, -a / b, b),
        -a / b,
        b,
        f"logistic fit, slope {b:.2f} logit per doubling",
    )


def dose_response(
    doses: Sequence[float], k: Sequence[int], n: Sequence[int], confidence: float = CONFIDENCE
) -> DoseResponse:
    """The logistic ED50 fit of divergence counts `k` of `n` runs at each dose (module docstring)."""
    doses_a, k_a, n_a = (np.asarray(v, dtype=float) for v in (doses, k, n))
    keep = n_a > 0
    x, k_a, n_a = np.log2(doses_a[keep]), k_a[keep], n_a[keep]
    if len(np.unique(x)) < 2:
        return DoseResponse(
            math.nan, math.nan, math.nan, math.nan, "single dose", "fewer than two doses: no fit"
        )
    fit, l_sup, est, slope, note = _case(x, k_a, n_a)
    if fit == "no dose response":
        return DoseResponse(math.nan, 0.0, math.inf, slope, fit, note)
    crit = float(stats.chi2.ppf(confidence, df=1))

    def excess(x50: float) -> float:  # profile deviance above the threshold: <= 0 inside the interval
        return 2.0 * (l_sup - _profile(x, k_a, n_a, x50)) - crit

    grid = np.arange(x.min() - PAD, x.max() + PAD + GRID_STEP / 2, GRID_STEP)
    if math.isfinite(est) and not grid[0] <= est <= grid[-1]:
        note += f"; the ED50 estimate lies beyond {PAD:g} doublings of the doses run"
        return DoseResponse(math.nan, 0.0, math.inf, slope, fit, note)
    values = np.array([excess(g) for g in grid])
    centre = int(np.argmin(np.abs(grid - est))) if math.isfinite(est) else int(np.argmin(values))
    lo_i = hi_i = centre
    while lo_i > 0 and values[lo_i - 1] <= 0:
        lo_i -= 1
    while hi_i < len(grid) - 1 and values[hi_i + 1] <= 0:
        hi_i += 1
    low = -math.inf if lo_i == 0 else optimize.brentq(excess, grid[lo_i - 1], grid[lo_i], xtol=1e-6)
    high = (
        math.inf if hi_i == len(grid) - 1 else optimize.brentq(excess, grid[hi_i], grid[hi_i + 1], xtol=1e-6)
    )
    open_sides = [side for side, end in (("below", low), ("above", high)) if math.isinf(end)]
    if fit == "none diverged" and open_sides == ["above"]:
        note += f"; one-sided interval: the ED50 lies above dose {_fmt_dose(low)}"
    elif fit == "all diverged" and open_sides == ["below"]:
        note += f"; one-sided interval: the ED50 lies below dose {_fmt_dose(high)}"
    elif open_sides:
        note += f"; interval unbounded {' and '.join(open_sides)} (open within {PAD:g} doublings of the doses run)"
    return DoseResponse(
        ed50=2.0**est if math.isfinite(est) else math.nan,
        low=0.0 if math.isinf(low) else 2.0**low,
        high=math.inf if math.isinf(high) else 2.0**high,
        slope=slope,
        fit=fit,
        note=note,
    )
