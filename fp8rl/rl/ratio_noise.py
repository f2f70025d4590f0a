"""The paper's mechanism in isolation: FP8-like noise on the PPO log-ratio pushes negative-advantage tokens
below the lower clip bound, where their gradient is zero; calibrated bounds restore the reference rate.

Synthetic tokens, no model. Each token has the probability `p` of its sampled token under pi_old
(`-log p ~ Exponential(mean_nll)`), an advantage of +-1 per sequence, and a clean log-ratio
`delta ~ N(sign(A) * drift, update_std)` (a policy update raises A>0 tokens and lowers A<0 ones): the
BF16 reference ratio is `exp(delta)`.

Noise model: quantization puts an error `e` of std `level` on every logit; through the log-softmax a
token's log-prob moves by `e_i - sum_j p_j e_j`, whose std is `level * (1 - p_i)` when the remaining
probability mass is spread thin: small on confident tokens, largest on low-probability ones. pi_theta
and pi_old carry independent errors, so the FP8 log-ratio is `delta + sqrt(2) * level * (1 - p) * z`.

For each noise level the study reports `clip/low_neg` (and `clip/high_pos`, `phantom/low_neg`,
`phantom/missed_neg`) under the fixed bounds (1 - clip_low, 1 + clip_high) and under `calibrated_bounds`,
next to the noise-free reference. The calibrated bounds use the calibrator's defaults: population `neg`,
the proportional U from the clamped L (`1 + clip_high` when the reference clips nothing), and a target
counted on the same tokens (every reference token of the population, `calib/ref_tokens`), as the
trainer counts each update's own shadow tokens (no pooling over updates, so no lag).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fp8rl.rl.bounds import ClipBounds
from fp8rl.rl.calibration import calibrated_bounds, reference_counts
from fp8rl.rl.diagnostics import clip_stats, phantom_low_neg
from fp8rl.vocabulary import CALIB_HIGH, CALIB_LOW, CLIP_HIGH_POS, CLIP_LOW_NEG


@dataclass(frozen=True)
class RatioNoiseSetup:
    """The synthetic batch: size, token probabilities, and the clean policy update."""

    n_tokens: int = 262_144
    seq_len: int = 256
    mean_nll: float = 0.7
    update_std: float = 0.1
    drift: float = 0.05
    seed: int = 0


DEFAULT_LEVELS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)


def _synthetic_batch(
    setup: RatioNoiseSetup,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator]:
    g = torch.Generator().manual_seed(setup.seed)
    n_seq = max(1, setup.n_tokens // setup.seq_len)
    shape = (n_seq, setup.seq_len)
    nll = torch.empty(shape, dtype=torch.float64).exponential_(1.0 / setup.mean_nll, generator=g)
    p = torch.exp(-nll)
    adv = torch.where(torch.rand(n_seq, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
    delta = (
        adv[:, None] * setup.drift + torch.randn(shape, generator=g, dtype=torch.float64) * setup.update_std
    )
    return p, adv, delta, g


def ratio_noise_study(
    levels: Sequence[float] = DEFAULT_LEVELS,
    *,
    clip_low: float,
    clip_high: float,
    population: str = "neg",
    upper: str = "proportional",
    low_range: tuple[float, float] = (0.5, 1.0),
    setup: RatioNoiseSetup = RatioNoiseSetup(),
) -> list[dict[str, float]]:
    """One row per noise level: `noise`, the calibrated `calib/low` / `calib/high`, `calib/ref_tokens`
    (the reference tokens that set the target), and for `ref` (BF16, fixed bounds), `fixed` (FP8, fixed
    bounds) and `calib` (FP8, calibrated bounds) the metrics `clip/low_neg`, `clip/high_pos` and, for
    the FP8 cases, `phantom/low_neg` and `phantom/missed_neg`, keyed `"{case} {metric}"`.
    """
    if any(not math.isfinite(lv) or lv < 0 for lv in levels):
        raise ValueError(f"ratio_noise_study: noise levels must be finite and >= 0, got {list(levels)}")
    p, adv, delta, g = _synthetic_batch(setup)
    mask = torch.ones(delta.shape, dtype=torch.bool)
    r_ref = torch.exp(delta)
    fixed = ClipBounds.fixed(clip_low, clip_high)
    ref = clip_stats(r_ref, adv, mask, *fixed)
    _, ref_tokens, _, _ = reference_counts(
        r_ref, adv, mask, clip_low=clip_low, clip_high=clip_high, population=population
    )
    rows = []
    for level in levels:
        noise = (
            math.sqrt(2.0) * level * (1.0 - p) * torch.randn(delta.shape, generator=g, dtype=torch.float64)
        )
        r = torch.exp(delta + noise)
        low, high = calibrated_bounds(
            r, r_ref, adv, mask, clip_low=clip_low, clip_high=clip_high, population=population,
            upper=upper, low_range=low_range,
        )  # fmt: skip
        row = {
            "noise": float(level),
            CALIB_LOW: low,
            CALIB_HIGH: high,
            "calib/ref_tokens": float(ref_tokens),
        }
        for case, (lo, _hi), stats in (
            ("ref", fixed, ref),
            ("fixed", fixed, clip_stats(r, adv, mask, *fixed)),
            ("calib", (low, high), clip_stats(r, adv, mask, low, high)),
        ):
            for name in (CLIP_LOW_NEG, CLIP_HIGH_POS):
                row[f"{case} {name}"] = stats[name]
            if case != "ref":
                for name, value in phantom_low_neg(r, r_ref, adv, mask, lo, fixed.low).items():
                    row[f"{case} {name}"] = value
        rows.append(row)
    return rows
