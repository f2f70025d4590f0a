"""Calibrated Clipping: move the FP8 lower clip bound so that FP8 zeroes as many negative-advantage
gradients as a BF16 reference would, no more, and rebalance the upper bound to match.

`calibrated_bounds` is the definition, in one place (`bounds_from_quantiles` does the work, so a later
correction is one change); `Calibrator` adds the reference modes (`shadow`, `run`, `static:<q>`), the
pooled target, the `calib/*` metrics and checkpointable state.

1. Target `q`: the fraction of reference ratios below `1 - clip_low` over the population: `neg`
   (negative-advantage valid tokens, the default: PPO-clip's lower bound only zeroes their gradient) or
   `all` (every valid token; an ablation that under-clips A<0 tokens, because A>0 tokens below L count
   toward the matched fraction without being clipped).
2. Lower bound `L`: the q-quantile of the FP8 ratios over the same population, clamped to `low_range`.
   "Quantile" is read as: among the bounds that clip exactly round(q * n) tokens (an interval between
   two order statistics) take `1 - clip_low` when it is one of them (so R = R_ref clips what the fixed
   bound clips, and gives it back whenever a token lies below it), else the interval's midpoint. With q = 0 nothing is clipped below: L sits just under min(R)
   (a relative 1e-6, so the same ratios recomputed a few float32 ulps apart are not clipped either),
   below the clamp floor if min(R) is, and at most the clamp ceiling.
3. Upper bound: `proportional`: `U = 1 + clip_high * (1 - L) / clip_low` with the clamped L, and
   `U = 1 + clip_high` when q = 0 (nothing to rebalance); `fixed`: `U = 1 + clip_high` (the ablation
   that separates "fewer zeroed negative gradients" from "a wider trust region"); `quantile`: U matches
   `q_hi = mean(R_ref > 1 + clip_high)` over the upper population (all valid tokens for `all`, the
   positive-advantage ones for `neg`: the tokens whose gradient the upper bound zeroes), chosen the
   same way, at least 1.
The bounds satisfy L <= 1 <= U.

4. The target tracks its reference without lag (`Calibrator`). With the `shadow` reference each update's
   target comes from that update's own shadow tokens: the BF16 ratios of the same tokens, in the same
   update, so FP8 clips as many of them as BF16 would (with `calib.sample_frac: 1` every token is
   re-scored and the count match is exact). Pooling the counts over updates (`momentum` > 0, an EMA of
   numerator and denominator) is an option for small shadow samples, at a measured cost: it lags a
   clip fraction that changes over the run (a fraction falling from 5 % to 1 % keeps a momentum-0.9
   target above the current one for ~10 updates, and the run then clips more than BF16;
   tests/unit/rl/test_calibration_lag.py). With the `run` reference the bf16 run has finished, so its
   per-step fractions can be smoothed with a centred window (`centred_window`): no lag. An update whose
   reference ratio is identically 1 (the policy has not moved since the old log-probs: the first update
   of a step) clips nothing below and leaves any pool alone. `calib/ref_tokens` is the effective sample
   size of every shadow target (the pooled denominator; the update's own count without pooling).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from fp8rl.rl._checks import check_finite, check_mask, check_same_shape, per_token
from fp8rl.rl.bounds import ClipBounds
from fp8rl.vocabulary import CALIB_FLOOR_BINDS, CALIB_HIGH, CALIB_LOW, CalibReference
from fp8rl.vocabulary import CALIB_POPULATIONS as POPULATIONS
from fp8rl.vocabulary import CALIB_UPPER_MODES as UPPER_MODES

NOTHING_BELOW_MARGIN = 1e-6  # q = 0: L = min(R) * (1 - margin)


def _populations(adv: torch.Tensor, m: torch.Tensor, population: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(lower population, upper population) masks."""
    if population == "all":
        return m, m
    if population == "neg":
        return m & (adv < 0), m & (adv > 0)
    raise ValueError(f"calibration: unknown population {population!r}; allowed: {', '.join(POPULATIONS)}")


@dataclass(frozen=True)
class CalibOptions:
    """The bound rule's options (steps 1-3 of the module docstring), checked once when made: the
    algorithm's fixed clip ratios, the population, the upper-bound mode and the clamp of L.
    `Calibrator` holds one for the run; the functional forms make one per call."""

    clip_low: float
    clip_high: float
    population: str = "neg"
    upper: str = "proportional"
    low_range: tuple[float, float] = (0.5, 1.0)

    def __post_init__(self) -> None:
        clip_low, clip_high, (lo, hi) = float(self.clip_low), float(self.clip_high), self.low_range
        if not (0.0 < clip_low < 1.0 and clip_high > 0.0):
            raise ValueError(
                f"calibration: need 0 < clip_low < 1 and clip_high > 0, got {clip_low}, {clip_high}"
            )
        if self.upper not in UPPER_MODES:
            raise ValueError(f"calibration: unknown upper {self.upper!r}; allowed: {', '.join(UPPER_MODES)}")
        if not 0.0 < lo <= hi <= 1.0:
            raise ValueError(
                f"calibration: low_range must satisfy 0 < low <= high <= 1, got {self.low_range}"
            )
        if self.population not in POPULATIONS:
            raise ValueError(
                f"calibration: unknown population {self.population!r}; allowed: {', '.join(POPULATIONS)}"
            )
        object.__setattr__(self, "clip_low", clip_low)
        object.__setattr__(self, "clip_high", clip_high)
        object.__setattr__(self, "low_range", (float(lo), float(hi)))

    @property
    def fixed(self) -> ClipBounds:
        """PPO's fixed interval (1 - clip_low, 1 + clip_high)."""
        return ClipBounds.fixed(self.clip_low, self.clip_high)


class ReferenceCounts(NamedTuple):
    """The reference's clip counts: `k` tokens with `R_ref < 1 - clip_low` among the `n` of the lower
    population, `k_hi` with `R_ref > 1 + clip_high` among the `n_hi` of the upper one."""

    k: int
    n: int
    k_hi: int
    n_hi: int

    def fractions(self) -> tuple[float | None, float | None]:
        """The clip fractions `(q, q_hi)`: `q = mean(R_ref < 1 - clip_low)` over the lower population,
        `q_hi = mean(R_ref > 1 + clip_high)` over the upper one; None where a population is empty."""
        return (self.k / self.n if self.n else None), (self.k_hi / self.n_hi if self.n_hi else None)


def reference_counts(
    ref_ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    population: str = "neg",
) -> ReferenceCounts:
    """The reference's clip counts `(k, n, k_hi, n_hi)` (`ReferenceCounts`; `.fractions()` the targets)."""
    m = check_mask(mask, "reference_counts", "mask")
    check_same_shape("reference_counts", "mask", m, ref_ratio=ref_ratio)
    adv = per_token("reference_counts", "advantages", advantages, m)
    check_finite("reference_counts", "ref_ratio", ref_ratio, m)
    pop_lo, pop_hi = _populations(adv, m, population)
    fixed, r = ClipBounds.fixed(clip_low, clip_high), ref_ratio.detach()
    k = int(((r < fixed.low) & pop_lo).sum())
    k_hi = int(((r > fixed.high) & pop_hi).sum())
    return ReferenceCounts(k, int(pop_lo.sum()), k_hi, int(pop_hi.sum()))


def _lower_bound(s: torch.Tensor, k: int, target: float, low_range: tuple[float, float]) -> float:
    """A bound with exactly `k` of the ascending values `s` strictly below it (ties aside): `target`
    itself when it qualifies, else the midpoint of the gap between the k-th and (k+1)-th values; then
    clamped to `low_range`. For k = 0: just under min(s), even below the clamp floor, at most its ceiling."""
    floor, ceil = low_range
    if k == 0:
        return min(float(s[0]) * (1.0 - NOTHING_BELOW_MARGIN), ceil)
    target = min(max(target, floor), ceil)
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
    population: str = "neg",
    upper: str = "proportional",
    low_range: tuple[float, float] = (0.5, 1.0),
) -> ClipBounds:
    """Bounds (L, U) under which a fraction `q` of the population's ratios lies strictly below L and
    (quantile mode) a fraction `q_high` strictly above U, to the nearest token (steps 2 and 3 of the
    module docstring).

    With `q` None or an empty population, the fixed bounds `(1 - clip_low, 1 + clip_high)` are returned.
    A `q` that rounds to no token counts as q = 0: nothing is clipped below, and the proportional U is
    `1 + clip_high`.
    """
    options = CalibOptions(clip_low, clip_high, population, upper, tuple(low_range))
    return _bounds(ratio, advantages, mask, q, q_high, options)


def _bounds(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    q: float | None,
    q_high: float | None,
    o: CalibOptions,
) -> ClipBounds:
    """`bounds_from_quantiles` with its options already checked."""
    clip_high, population, upper, low_range, fixed = o.clip_high, o.population, o.upper, o.low_range, o.fixed
    clip_low = o.clip_low
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
    k = round(q * r_lo.numel())
    low = _lower_bound(r_lo, k, fixed.low, low_range)
    if upper == "fixed":
        return ClipBounds(low, fixed.high)
    if upper == "proportional":
        return ClipBounds(low, fixed.high if k == 0 else 1.0 + clip_high * (1.0 - low) / clip_low)
    if q_high is None or int(pop_hi.sum()) == 0:
        return ClipBounds(low, fixed.high)
    if not 0.0 <= q_high <= 1.0:
        raise ValueError(f"calibrated_bounds: upper target quantile must be in [0, 1], got {q_high}")
    r_hi, _ = torch.sort(ratio.detach()[pop_hi].to(torch.float64))
    return ClipBounds(low, _upper_bound(r_hi, round(q_high * r_hi.numel()), fixed.high))


def floor_binds(
    ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, q: float | None, o: CalibOptions
) -> bool | None:
    """Whether `low_range`'s floor binds the calibrated lower bound of this update: the bound that would
    put a fraction `q` of the population's ratios below it lies under the floor, so the floor is used and
    more than `q` of them stay below it: FP8 still clips more than the reference, and the calibration does
    not complete. None without a target (q None or 0, or an empty population)."""
    m = check_mask(mask, "floor_binds", "mask")
    pop_lo, _ = _populations(per_token("floor_binds", "advantages", advantages, m), m, o.population)
    if q is None or int(pop_lo.sum()) == 0:
        return None
    r_lo, _ = torch.sort(ratio.detach()[pop_lo].to(torch.float64))
    k = round(q * r_lo.numel())
    if k == 0:
        return None
    unclamped = _lower_bound(r_lo, k, o.fixed.low, (-math.inf, o.low_range[1]))
    return unclamped < o.low_range[0]


def centred_window(
    targets: dict[int, tuple[float | None, float | None]], width: int
) -> dict[int, tuple[float | None, float | None]]:
    """Per-step targets of a finished reference run (`calib.reference: run`) smoothed by a centred moving
    mean over `width` steps (odd; 1 returns them as they are): step t averages the steps within
    (width - 1) / 2 of it that have a value, so the window looks as far ahead as behind and a trend
    is not delayed. Each of the pair (q, q_high) is smoothed on its own; None values are left out."""
    if width < 1 or width % 2 == 0:
        raise ValueError(f"centred_window: width must be an odd number >= 1, got {width}")
    half = (width - 1) // 2
    steps = sorted(targets)

    def smooth(step: int, i: int) -> float | None:
        vals = [targets[s][i] for s in steps if abs(s - step) <= half and targets[s][i] is not None]
        return sum(vals) / len(vals) if vals else None

    return {step: (smooth(step, 0), smooth(step, 1)) for step in steps}


def calibrated_bounds(
    ratio: torch.Tensor,
    ref_ratio: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    population: str = "neg",
    upper: str = "proportional",
    low_range: tuple[float, float] = (0.5, 1.0),
    ref_mask: torch.Tensor | None = None,
) -> ClipBounds:
    """Calibrated (L, U) for FP8 ratios `ratio` given BF16 reference ratios `ref_ratio` of the same tokens:
    the target `q` is the fraction of reference ratios below `1 - clip_low`, `L` the q-th quantile of
    `ratio` (clamped), and `U` follows from the clamped L (proportional) or from the matching upper
    fraction; see the module docstring. One sample, no pooling (`Calibrator` pools over updates).

    `ref_mask` (default `response_mask`) restricts the tokens that set the target, e.g. to the shadow
    subsample, while the quantiles of `ratio` are taken over `response_mask`.
    """
    m = check_mask(response_mask, "calibrated_bounds")
    rm = m if ref_mask is None else check_mask(ref_mask, "calibrated_bounds", "ref_mask")
    check_same_shape("calibrated_bounds", "response_mask", m, ratio=ratio, ref_ratio=ref_ratio, ref_mask=rm)
    q, q_hi = reference_counts(
        ref_ratio, advantages, rm, clip_low=clip_low, clip_high=clip_high, population=population
    ).fractions()
    return bounds_from_quantiles(
        ratio, advantages, m, q, q_high=q_hi, clip_low=clip_low, clip_high=clip_high,
        population=population, upper=upper, low_range=low_range,
    )  # fmt: skip


def step_targets(
    run_targets: Mapping[int, tuple[float | None, float | None]], step: int, updates_per_step: int
) -> tuple[float | None, float | None]:
    """A step's targets from the bf16 run (`calib.reference: run`) for the updates after the first; the
    reference trainer's and the verl loss's (fp8rl.adapters.verl_loss).

    The bf16 run's per-step clip fraction is the mean over its N updates, and its first update clips
    nothing (the policy has not moved: the ratio is exactly 1). This run's first update clips nothing
    too, so its N - 1 later updates carry the whole fraction: q * N / (N - 1), at most 1."""
    n = updates_per_step
    scale = n / (n - 1) if n > 1 else 1.0
    q, q_hi = run_targets.get(step, (None, None))
    return (
        None if q is None else min(1.0, q * scale),
        None if q_hi is None else min(1.0, q_hi * scale),
    )


class Calibrator:
    """Stateful calibrated clipping for a training run: reference mode, pooled target, metrics, state.

    `reference`: `shadow` (pass `ref_ratio` and `ref_mask` from the BF16 shadow pass each update: the
    update's own counts set its target, or a pool of them with `momentum` > 0; step 4 of the module
    docstring), `run` (pass the BF16 run's clip fractions of the
    same step as `target_q`, and `target_q_high` for `upper="quantile"`: its `clip/low_all` /
    `clip/high_all` for population `all`, `clip/low_neg` / `clip/high_pos` for `neg`: that step's means
    over its updates, with the first-update correction of `step_targets`), or `static:<q>` (a fixed target; proportional upper only).

    `momentum` m (shadow only; default 0: each update's counts alone, no lag): after each update with
    reference tokens, `num = m * num + k` and `den = m * den + n` for the lower and the upper population;
    the target is `num / den`, pooled over about 1 / (1 - m) updates (and lagging by about as many), and
    `den` is `calib/ref_tokens`. An update without reference tokens of its own uses the pool as it is
    (with m = 0: the last update's counts).

    `ref_unchanged=True` (the policy has not moved since the old log-probs, so the reference ratio is
    identically 1; a `shadow` update whose reference tokens all have ratio exactly 1 counts as such too):
    nothing is clipped below, `U = 1 + clip_high` (proportional), the pool is left alone, and
    `calib/target_q` is 0 for that update. An update without any target (empty pool, or `target_q=None`
    in `run` mode) gets the fixed bounds and no `calib/target_q`. A `run` step without `target_q_high`
    in quantile mode keeps the fixed upper bound for that update.

    `every` N (the recalibration cadence; None, the default: every update): the bounds are computed
    only in steps where `(step - 1) % N == 0` (`due(step)`) and held, as `held`, through the steps
    between; the held pair is the step's last update's (its first update's, which clips nothing below,
    only when the step has no other), and it is checkpointed with the pool.
    """

    # the pooled reference counts (shadow): clipped tokens and population, lower and upper
    STATE_KEYS = ("lo_num", "lo_den", "hi_num", "hi_den")

    def __init__(
        self,
        clip_low: float,
        clip_high: float,
        *,
        reference: str | CalibReference = "shadow",
        population: str = "neg",
        upper: str = "proportional",
        low_range: tuple[float, float] = (0.5, 1.0),
        momentum: float = 0.0,
        every: int | None = None,
    ) -> None:
        if every is not None and (isinstance(every, bool) or int(every) != every or every < 1):
            raise ValueError(f"Calibrator: every must be a whole number of steps >= 1 or None, got {every}")
        self.every = None if every is None else int(every)
        self.held: ClipBounds | None = None
        try:
            self.options = CalibOptions(clip_low, clip_high, population, upper, tuple(low_range))
        except ValueError as exc:
            raise ValueError(f"Calibrator: {str(exc).removeprefix('calibration: ')}") from None
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
        self.momentum = float(momentum)
        self.lo_num = self.lo_den = self.hi_num = self.hi_den = 0.0
        self._held_first = False

    @classmethod
    def from_config(cls, calib: Any, *, clip_low: float, clip_high: float) -> Calibrator:
        """From a `CalibConfig` of fp8rl.config and the algorithm's fixed clip ratios: the one
        constructor of the reference trainer and the verl loss."""
        return cls(
            clip_low, clip_high, reference=calib.reference, population=calib.population,
            upper=calib.upper, low_range=tuple(calib.low_range), momentum=calib.momentum,
            every=getattr(calib, "every", None),
        )  # fmt: skip

    def due(self, step: int) -> bool:
        """Whether the bounds are computed in `step` (1-based): every step without a cadence, else the
        steps where `(step - 1) % every == 0`, and any step while nothing is held yet."""
        return self.every is None or self.held is None or (step - 1) % self.every == 0

    def hold(self, bounds: ClipBounds, *, first_update: bool) -> None:
        """Keep `bounds` for the steps until the next recalibration (with a cadence only): a step's
        later updates replace its first update's bounds, never the reverse."""
        if self.every is not None and (not first_update or self.held is None or self._held_first):
            self.held, self._held_first = bounds, first_update

    def held_bounds(self) -> tuple[ClipBounds, dict[str, float]]:
        """The held bounds and their `calib/low`, `calib/high`."""
        return self.held, {CALIB_LOW: self.held.low, CALIB_HIGH: self.held.high}

    def bounds(
        self,
        ratio: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        ref_ratio: torch.Tensor | None = None,
        ref_mask: torch.Tensor | None = None,
        target_q: float | None = None,
        target_q_high: float | None = None,
        ref_unchanged: bool = False,
    ) -> tuple[ClipBounds, dict[str, float]]:
        """The bounds for this mini-batch's FP8 ratios; returns `(bounds, metrics)` with `calib/low`,
        `calib/high` (the bounds to use), `calib/target_q` (+ `calib/target_q_high` in quantile mode)
        when a target was available, and `calib/ref_tokens` (the pooled denominator) for `shadow`."""
        if self.reference.mode == "shadow":
            q, q_hi, ref_unchanged = self._pooled_targets(
                ratio, advantages, response_mask, ref_ratio, ref_mask, ref_unchanged
            )
        elif self.reference.mode == "run":
            q, q_hi = target_q, target_q_high
        else:
            q, q_hi = self.reference.q, None
        if ref_unchanged:
            q, q_hi = 0.0, (0.0 if self.options.upper == "quantile" else None)
        metrics: dict[str, float] = {}
        bounds = _bounds(ratio, advantages, response_mask, q, q_hi, self.options)
        if q is not None:
            metrics["calib/target_q"] = float(q)
            if self.options.upper == "quantile" and q_hi is not None:
                metrics["calib/target_q_high"] = float(q_hi)
        if self.reference.mode == "shadow" and self.lo_den > 0:
            metrics["calib/ref_tokens"] = self.lo_den
        if (binds := floor_binds(ratio, advantages, response_mask, q, self.options)) is not None:
            metrics[CALIB_FLOOR_BINDS] = float(binds)
        metrics[CALIB_LOW], metrics[CALIB_HIGH] = bounds
        return bounds, metrics

    def _pooled_targets(self, ratio, advantages, mask, ref_ratio, ref_mask, ref_unchanged):
        """`(q, q_hi, unchanged)` from the pool, after adding this update's reference counts unless the
        reference ratio is identically 1."""
        if ref_ratio is None:
            raise ValueError("Calibrator(reference='shadow').bounds needs ref_ratio from the shadow pass")
        m = check_mask(mask, "Calibrator.bounds")
        rm = m if ref_mask is None else check_mask(ref_mask, "Calibrator.bounds", "ref_mask")
        check_same_shape(
            "Calibrator.bounds", "response_mask", m, ratio=ratio, ref_ratio=ref_ratio, ref_mask=rm
        )
        if not ref_unchanged and bool(rm.any()):
            ref_unchanged = bool((ref_ratio.detach()[rm] == 1.0).all())
        if not ref_unchanged:
            k, n, k_hi, n_hi = reference_counts(
                ref_ratio, advantages, rm, clip_low=self.options.clip_low,
                clip_high=self.options.clip_high, population=self.options.population,
            )  # fmt: skip
            mom = self.momentum
            if n:
                self.lo_num, self.lo_den = mom * self.lo_num + k, mom * self.lo_den + n
            if n_hi:
                self.hi_num, self.hi_den = mom * self.hi_num + k_hi, mom * self.hi_den + n_hi
        q = self.lo_num / self.lo_den if self.lo_den > 0 else None
        q_hi = self.hi_num / self.hi_den if self.hi_den > 0 else None
        return q, q_hi, ref_unchanged

    def state_dict(self) -> dict[str, Any]:
        """The pooled reference counts (and, with a cadence, the held bounds): all the state that later
        bounds depend on."""
        state = {key: getattr(self, key) for key in self.STATE_KEYS}
        if self.every is not None:
            state["held"] = None if self.held is None else [self.held.low, self.held.high, self._held_first]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = set(self.STATE_KEYS) - set(state)
        if missing:
            raise ValueError(
                f"Calibrator.load_state_dict: missing keys {sorted(missing)} (a checkpoint from before the "
                "pooled target cannot resume a calibrated run)"
            )
        for key in self.STATE_KEYS:
            setattr(self, key, float(state[key]))
        held = state.get("held")
        self.held = None if held is None else ClipBounds(held[0], held[1])
        self._held_first = bool(held[2]) if held is not None else False
