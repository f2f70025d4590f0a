"""Calibrated Clipping (DESIGN.md §5): move the FP8 clip bounds so that the fraction of tokens clipped
matches what a BF16 reference would clip.

`calibrated_bounds` is the definition, in one place (`bounds_from_quantiles` does the work, so a later
correction is one change); `Calibrator` adds the reference modes (`shadow`, `run`, `static:<q>`), EMA
momentum over updates, the `calib/*` metrics and checkpointable state.

Populations: the lower target and the lower quantile are taken over `all` valid tokens or only the
negative-advantage ones (`neg`). The upper quantile (`upper="quantile"`) uses all valid tokens for
`all` and the positive-advantage tokens for `neg` (the tokens whose gradient the upper bound zeroes;
§5 leaves this open). The bounds always satisfy L <= 1 <= U.

"L = quantile(R, q)" is read as: among the bounds that clip exactly round(q * n) tokens (an interval
between two order statistics of R) take 1 - clip_low when it is one of them, else the interval's
midpoint. This makes R = R_ref return the fixed bounds exactly (issue 4's test). For q = 0 that gives
L = min(clamp(1 - clip_low), min(R)) where §5 says min(clamp floor, min(R)): both clip nothing, but §5's
choice would also widen the proportional upper bound (to 1.7 for 0.2/0.2) when nothing needs calibrating.
"""

from __future__ import annotations

from typing import Any

import torch

from fp8rl.rl._checks import check_finite, check_mask, check_same_shape, per_token
from fp8rl.rl.bounds import ClipBounds
from fp8rl.vocabulary import CALIB_POPULATIONS as POPULATIONS
from fp8rl.vocabulary import CALIB_UPPER_MODES as UPPER_MODES
from fp8rl.vocabulary import CalibReference


def _populations(adv: torch.Tensor, m: torch.Tensor, population: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(lower population, upper population) masks."""
    if population == "all":
        return m, m
    if population == "neg":
        return m & (adv < 0), m & (adv > 0)
    raise ValueError(f"calibration: unknown population {population!r}; allowed: {', '.join(POPULATIONS)}")


def _check_options(clip_low: float, clip_high: float, upper: str, low_range: tuple[float, float]) -> None:
    if not 0.0 < clip_low < 1.0 or clip_high <= 0.0:
        raise ValueError(f"calibration: need 0 < clip_low < 1 and clip_high > 0, got {clip_low}, {clip_high}")
    if upper not in UPPER_MODES:
        raise ValueError(f"calibration: unknown upper {upper!r}; allowed: {', '.join(UPPER_MODES)}")
    lo, hi = low_range
    if not 0.0 < lo <= hi <= 1.0:
        raise ValueError(f"calibration: low_range must satisfy 0 < low <= high <= 1, got {low_range}")


def target_quantiles(
    ref_ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    population: str = "all",
) -> tuple[float | None, float | None]:
    """The reference's clip fractions `(q, q_hi)`: `q = mean(R_ref < 1 - clip_low)` over the lower
    population, `q_hi = mean(R_ref > 1 + clip_high)` over the upper one; None where a population is empty.
    """
    m = check_mask(mask, "target_quantiles", "mask")
    check_same_shape("target_quantiles", "mask", m, ref_ratio=ref_ratio)
    adv = per_token("target_quantiles", "advantages", advantages, m)
    check_finite("target_quantiles", "ref_ratio", ref_ratio, m)
    pop_lo, pop_hi = _populations(adv, m, population)
    fixed = ClipBounds.fixed(clip_low, clip_high)
    r = ref_ratio.detach()
    n_lo, n_hi = int(pop_lo.sum()), int(pop_hi.sum())
    q = int(((r < fixed.low) & pop_lo).sum()) / n_lo if n_lo else None
    q_hi = int(((r > fixed.high) & pop_hi).sum()) / n_hi if n_hi else None
    return q, q_hi


def _lower_bound(s: torch.Tensor, k: int, target: float, low_range: tuple[float, float]) -> float:
    """A bound with exactly `k` of the ascending values `s` strictly below it (ties aside): `target`
    itself when it qualifies, else the midpoint of the gap between the k-th and (k+1)-th values; then
    clamped to `low_range`. For k = 0 nothing is clipped, even below the clamp floor."""
    floor, ceil = low_range
    target = min(max(target, floor), ceil)
    if k == 0:
        return min(target, float(s[0]))
    below, above = float(s[k - 1]), (float(s[k]) if k < s.numel() else float("inf"))
    bound = target if below < target <= above else (below + above) / 2 if k < s.numel() else ceil
    return min(max(bound, floor), ceil)


def _upper_bound(s: torch.Tensor, k: int, target: float) -> float:
    """A bound with exactly `k` of the ascending values `s` strictly above it: `target` when it
    qualifies, else the midpoint of the gap; at least 1."""
    n = s.numel()
    if k == 0:
        return max(target, float(s[-1]), 1.0)
    below = float(s[n - k - 1]) if k < n else float("-inf")
    above = float(s[n - k])
    bound = target if below <= target < above else (below + above) / 2 if k < n else 1.0
    return max(bound, 1.0)


def bounds_from_quantiles(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    q: float | None,
    *,
    q_high: float | None = None,
    clip_low: float,
    clip_high: float,
    population: str = "all",
    upper: str = "proportional",
    low_range: tuple[float, float] = (0.5, 1.0),
) -> ClipBounds:
    """Bounds (L, U) under which a fraction `q` of the population's ratios lies strictly below L and
    (quantile mode) a fraction `q_high` strictly above U, to the nearest token.

    L is the empirical q-quantile of R, chosen within the gap of values that clip exactly
    `round(q * n)` tokens: `1 - clip_low` itself when it lies in that gap (so R = R_ref gives back the
    fixed bounds exactly), else the gap's midpoint; clamped to `low_range`. With `q = 0` nothing is
    clipped: `L = min(clamp(1 - clip_low), min(R))`, below the clamp floor if min(R) is.
    `upper="proportional"`: `U = 1 + clip_high * (1 - L) / clip_low`; `"quantile"`: U chosen the same way
    so that a fraction `q_high` lies above it (`1 + clip_high` when it qualifies), and at least 1.
    With `q` None or an empty population, the fixed bounds `(1 - clip_low, 1 + clip_high)` are returned.
    """
    _check_options(clip_low, clip_high, upper, low_range)
    fixed = ClipBounds.fixed(clip_low, clip_high)
    m = check_mask(mask, "calibrated_bounds", "mask")
    check_same_shape("calibrated_bounds", "mask", m, ratio=ratio)
    adv = per_token("calibrated_bounds", "advantages", advantages, m)
    check_finite("calibrated_bounds", "ratio", ratio, m)
    pop_lo, pop_hi = _populations(adv, m, population)
    if q is None or int(pop_lo.sum()) == 0:
        return fixed
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"calibrated_bounds: target quantile q must be in [0, 1], got {q}")
    r_lo, _ = torch.sort(ratio.detach()[pop_lo].to(torch.float64))
    low = _lower_bound(r_lo, round(q * r_lo.numel()), fixed.low, low_range)
    if upper == "proportional":
        return ClipBounds(low, 1.0 + clip_high * (1.0 - low) / clip_low)
    if q_high is None or int(pop_hi.sum()) == 0:
        return ClipBounds(low, fixed.high)
    if not 0.0 <= q_high <= 1.0:
        raise ValueError(f"calibrated_bounds: upper target quantile must be in [0, 1], got {q_high}")
    r_hi, _ = torch.sort(ratio.detach()[pop_hi].to(torch.float64))
    return ClipBounds(low, _upper_bound(r_hi, round(q_high * r_hi.numel()), fixed.high))


def calibrated_bounds(
    ratio: torch.Tensor,
    ref_ratio: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    population: str = "all",
    upper: str = "proportional",
    low_range: tuple[float, float] = (0.5, 1.0),
    ref_mask: torch.Tensor | None = None,
) -> ClipBounds:
    """Calibrated (L, U) for FP8 ratios `ratio` given BF16 reference ratios `ref_ratio` of the same tokens
    (DESIGN.md §5): the target `q` is the fraction of reference ratios below `1 - clip_low`, `L` the q-th
    quantile of `ratio`, and `U` follows from L (proportional) or from the matching upper fraction.

    `ref_mask` (default `response_mask`) restricts the tokens that set the target, e.g. to the shadow
    subsample, while the quantiles of `ratio` are taken over `response_mask`.
    """
    m = check_mask(response_mask, "calibrated_bounds")
    rm = m if ref_mask is None else check_mask(ref_mask, "calibrated_bounds", "ref_mask")
    check_same_shape("calibrated_bounds", "response_mask", m, ratio=ratio, ref_ratio=ref_ratio, ref_mask=rm)
    q, q_hi = target_quantiles(
        ref_ratio, advantages, rm, clip_low=clip_low, clip_high=clip_high, population=population
    )
    return bounds_from_quantiles(
        ratio, advantages, m, q, q_high=q_hi, clip_low=clip_low, clip_high=clip_high,
        population=population, upper=upper, low_range=low_range,
    )  # fmt: skip


class Calibrator:
    """Stateful calibrated clipping for a training run: reference mode, EMA, metrics, checkpoint state.

    `reference`: `shadow` (pass `ref_ratio` from the BF16 shadow pass each update), `run` (pass the
    BF16 run's clip fractions of the same step as `target_q`, and `target_q_high` for
    `upper="quantile"`: its `clip/low_all` / `clip/high_all` for population `all`, `clip/low_neg` /
    `clip/high_pos` for `neg`), or `static:<q>` (a fixed target; proportional upper only).
    A `run` step without `target_q_high` in quantile mode keeps the fixed upper bound for that update.
    `momentum` m: the bounds returned are `m * previous + (1 - m) * new` after the first update. An
    update without a target (empty population, or `target_q=None` in `run` mode) returns the previous
    bounds (the fixed ones before any update) and leaves the state unchanged.
    """

    def __init__(
        self,
        clip_low: float,
        clip_high: float,
        *,
        reference: str | CalibReference = "shadow",
        population: str = "all",
        upper: str = "proportional",
        low_range: tuple[float, float] = (0.5, 1.0),
        momentum: float = 0.0,
    ) -> None:
        _check_options(clip_low, clip_high, upper, tuple(low_range))
        if population not in POPULATIONS:
            raise ValueError(
                f"Calibrator: unknown population {population!r}; allowed: {', '.join(POPULATIONS)}"
            )
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"Calibrator: momentum must be in [0, 1), got {momentum}")
        try:
            self.reference = CalibReference.parse(reference)
        except ValueError as exc:
            raise ValueError(f"Calibrator: {exc}") from None
        if self.reference.mode == "static" and upper == "quantile":
            raise ValueError(
                "Calibrator: reference 'static:<q>' has no upper target; use upper='proportional'"
            )
        self.clip_low, self.clip_high = float(clip_low), float(clip_high)
        self.fixed = ClipBounds.fixed(self.clip_low, self.clip_high)
        self.population, self.upper = population, upper
        self.low_range = (float(low_range[0]), float(low_range[1]))
        self.momentum = float(momentum)
        self.low: float | None = None
        self.high: float | None = None
        self.updates = 0

    @classmethod
    def from_config(cls, calib: Any, *, clip_low: float, clip_high: float) -> Calibrator:
        """From a `CalibConfig` of fp8rl.config and the algorithm's fixed clip ratios: the one
        constructor of the reference trainer and the verl loss."""
        return cls(
            clip_low, clip_high, reference=calib.reference, population=calib.population,
            upper=calib.upper, low_range=tuple(calib.low_range), momentum=calib.momentum,
        )  # fmt: skip

    def bounds(
        self,
        ratio: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        ref_ratio: torch.Tensor | None = None,
        target_q: float | None = None,
        target_q_high: float | None = None,
        ref_mask: torch.Tensor | None = None,
    ) -> tuple[ClipBounds, dict[str, float]]:
        """Update with this mini-batch's FP8 ratios; returns `(bounds, metrics)` with `calib/low`,
        `calib/high` (the bounds to use), and `calib/target_q` (+ `calib/target_q_high` in quantile mode)
        when a target was available."""
        q, q_hi = self._targets(
            ratio, advantages, response_mask, ref_ratio, target_q, target_q_high, ref_mask
        )
        metrics: dict[str, float] = {}
        if q is not None:
            low, high = bounds_from_quantiles(
                ratio, advantages, response_mask, q, q_high=q_hi, clip_low=self.clip_low,
                clip_high=self.clip_high, population=self.population, upper=self.upper,
                low_range=self.low_range,
            )  # fmt: skip
            if self.updates and self.momentum > 0 and self.low is not None and self.high is not None:
                low = self.momentum * self.low + (1.0 - self.momentum) * low
                high = self.momentum * self.high + (1.0 - self.momentum) * high
            self.low, self.high, self.updates = low, high, self.updates + 1
            metrics["calib/target_q"] = float(q)
            if self.upper == "quantile" and q_hi is not None:
                metrics["calib/target_q_high"] = float(q_hi)
        bounds = self.current()
        metrics["calib/low"], metrics["calib/high"] = bounds
        return bounds, metrics

    def current(self) -> ClipBounds:
        """The bounds in force: the last calibrated ones, or the fixed ones before the first update."""
        if self.low is None or self.high is None:
            return self.fixed
        return ClipBounds(self.low, self.high)

    def _targets(self, ratio, advantages, mask, ref_ratio, target_q, target_q_high, ref_mask):
        if self.reference.mode == "shadow":
            if ref_ratio is None:
                raise ValueError("Calibrator(reference='shadow').bounds needs ref_ratio from the shadow pass")
            m = check_mask(mask, "Calibrator.bounds")
            rm = m if ref_mask is None else check_mask(ref_mask, "Calibrator.bounds", "ref_mask")
            check_same_shape(
                "Calibrator.bounds", "response_mask", m, ratio=ratio, ref_ratio=ref_ratio, ref_mask=rm
            )
            return target_quantiles(
                ref_ratio, advantages, rm, clip_low=self.clip_low, clip_high=self.clip_high,
                population=self.population,
            )  # fmt: skip
        if self.reference.mode == "run":
            return target_q, target_q_high
        return self.reference.q, None

    def state_dict(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = {"low", "high", "updates"} - set(state)
        if missing:
            raise ValueError(f"Calibrator.load_state_dict: missing keys {sorted(missing)}")
        self.low = None if state["low"] is None else float(state["low"])
        self.high = None if state["high"] is None else float(state["high"])
        self.updates = int(state["updates"])
