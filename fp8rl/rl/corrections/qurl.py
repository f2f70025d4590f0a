"""`qurl`: QuRL's adaptive clip range (Li et al., ICLR 2026, arXiv 2602.13953).

QuRL samples with a quantized actor and updates a full-precision one; its Adaptive Clipping Range sets
the clip ratio from the policy ratio between the full-precision and the quantized actor, because the
quantized ratio clips far more tokens than the full-precision one would. No code is public. Here the
quantized ratio is the FP8 trainer's `R = pi_theta / pi_old` and the full-precision one is the BF16
shadow pass's `R_ref` of the same tokens (fp8rl.engine.shadow). The reading implemented: per update,
the gap `g = mean_t |log R_t - log R_ref,t|` over the shadow tokens measures how far quantization moved
the ratio, and the clip range is widened by it in log space,

    L = (1 - clip_low) * exp(-g),   U = (1 + clip_high) * exp(g),

so a token is clipped only where its ratio leaves the trust region by more than the quantization
noise of the ratio. With no quantization noise (`R = R_ref`, and on every step's first update, where
both ratios are 1) the bounds are PPO's. Why this reading: the clip range is set from the
full-precision/quantized ratio alone (the paper's ingredient), it is one scalar per update as PPO's clip
ratio is, and it differs from calibrated clipping, which matches clip counts by quantile instead.
There are no per-token weights; the bounds apply on top of whatever bounds the variant has.
Metrics: `qurl/gap`, `qurl/low`, `qurl/high` (means over the step's updates).
"""

from __future__ import annotations

import math

import torch

from fp8rl.rl._checks import LOG_RATIO_CLAMP, check_same_shape
from fp8rl.rl.bounds import ClipBounds
from fp8rl.rl.corrections._registry import (
    Correction,
    CorrectionInputs,
    CorrectionOptions,
    register_correction,
)


def qurl_bounds(
    ratio: torch.Tensor, ref_ratio: torch.Tensor, ref_mask: torch.Tensor, fixed: ClipBounds
) -> tuple[ClipBounds, dict[str, float]]:
    """The update's bounds (module docstring) from the FP8 `ratio`, its BF16 `ref_ratio` and the shadow
    tokens `ref_mask` [B, T]; `fixed` and no metrics when there is no shadow token."""
    m = ref_mask.bool()
    check_same_shape("qurl_bounds", "ref_mask", m, ratio=ratio, ref_ratio=ref_ratio)
    if not bool(m.any()):
        return fixed, {}
    with torch.no_grad():
        lr = torch.log(ratio.detach().double()[m]).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        lref = torch.log(ref_ratio.detach().double()[m]).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        gap = float((lr - lref).abs().mean())
    return widened(fixed, gap)


def widened(fixed: ClipBounds, gap: float) -> tuple[ClipBounds, dict[str, float]]:
    """`fixed` widened by the gap `g` in log space (module docstring), with the `qurl/*` metrics: the
    step from the gap to the bounds, shared by the reference trainer and the verl loss
    (fp8rl.adapters.verl_qurl), which measures its gap over DP ranks."""
    bounds = ClipBounds(fixed.low * math.exp(-gap), fixed.high * math.exp(gap))
    return bounds, {"qurl/gap": gap, "qurl/low": bounds.low, "qurl/high": bounds.high}


@register_correction("qurl", bounds=qurl_bounds)
def qurl(inputs: CorrectionInputs, options: CorrectionOptions) -> Correction:
    return Correction(None, None, {})
