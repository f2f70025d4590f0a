"""`icepop_adaptive`: IcePop whose masking band adapts as the rollout/trainer gap widens.

IcePop (arXiv 2510.18855) zeroes every token whose ratio `r_t = exp(old_t - rollout_t)` leaves a fixed
band `[alpha, beta]`. As the mismatch grows, a fixed band masks an ever larger share of the tokens and
the update is left with little gradient; the follow-up asks for a masking region that adapts to the gap.
No code of it is public; the reading implemented here: the band starts at IcePop's `[alpha, beta]`
(`tis.icepop`) and widens, on each side separately, just enough that at most
`k = floor(mask_frac * n / 2)` of the step's `n` valid tokens lie outside it (`tis.icepop_mask_frac`,
vocabulary `ADAPTIVE_ICEPOP_MASK_FRAC`):

    low  = min(alpha, r_(k+1)),   high = max(beta, r_(n-k))

with `r_(i)` the i-th smallest ratio of the step. While the gap is small the band is IcePop's and the
correction equals `icepop`; when the fixed band would mask more than `k` tokens on a side, that side
moves out to the (k+1)-th most extreme ratio, so the masked share stays bounded and only the most
extreme tokens are dropped. Tokens inside keep `r_t` as their weight, as in IcePop. Why this reading:
it keeps IcePop's estimator unchanged where IcePop works and states the adaptation as one number with
a meaning (the largest share of the batch the mask may drop), with no schedule to tune.
"""

from __future__ import annotations

import math

import torch

from fp8rl.rl._checks import LOG_RATIO_CLAMP
from fp8rl.rl.corrections._registry import (
    Correction,
    CorrectionInputs,
    CorrectionOptions,
    check_band,
    log_ratio,
    register_correction,
)
from fp8rl.rl.corrections.icepop import masked_metrics
from fp8rl.vocabulary import ADAPTIVE_ICEPOP_MASK_FRAC, ICEPOP_BAND


def adaptive_band(
    ratio: torch.Tensor,
    mask: torch.Tensor,
    *,
    band: tuple[float, float] = ICEPOP_BAND,
    mask_frac: float = ADAPTIVE_ICEPOP_MASK_FRAC,
) -> tuple[float, float]:
    """The band `(low, high)` of the module docstring over the valid ratios (`mask` bool); the fixed band
    when there is no valid token."""
    fn = "adaptive_band"
    lo, hi = check_band(band, fn, positive=False)
    if not 0.0 <= mask_frac < 1.0:
        raise ValueError(f"{fn}: mask_frac must be in [0, 1), got {mask_frac}")
    r, _ = torch.sort(ratio.detach()[mask].to(torch.float64))
    n = r.numel()
    if n == 0:
        return lo, hi
    k = math.floor(mask_frac * n / 2)
    return min(lo, float(r[k])), max(hi, float(r[n - 1 - k]))


def adaptive_icepop_weights(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    band: tuple[float, float] = ICEPOP_BAND,
    mask_frac: float = ADAPTIVE_ICEPOP_MASK_FRAC,
) -> tuple[torch.Tensor, tuple[float, float]]:
    """`(weights [B, T], band)`: `r_t` inside the step's adaptive band, 0 outside and at padding. Detached."""
    d, m = log_ratio(old_log_prob, rollout_log_prob, response_mask, "adaptive_icepop_weights")
    r = torch.exp(d.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return adaptive_icepop_from_ratios(r, m, band=band, mask_frac=mask_frac)


def adaptive_icepop_from_ratios(
    ratio: torch.Tensor,
    mask: torch.Tensor,
    *,
    band: tuple[float, float] = ICEPOP_BAND,
    mask_frac: float = ADAPTIVE_ICEPOP_MASK_FRAC,
) -> tuple[torch.Tensor, tuple[float, float]]:
    """`adaptive_icepop_weights` from the ratios `r_t` themselves (`mask` bool): what the verl path has,
    where verl's rollout correction hands the loss the untruncated ratios (fp8rl.adapters.verl_icepop)."""
    r = ratio.detach()
    lo, hi = adaptive_band(r, mask, band=band, mask_frac=mask_frac)
    inside = mask & (r.to(torch.float64) >= lo) & (r.to(torch.float64) <= hi)
    return torch.where(inside, r, torch.zeros_like(r)), (lo, hi)


@register_correction("icepop_adaptive")
def icepop_adaptive(inputs: CorrectionInputs, options: CorrectionOptions) -> Correction:
    """`tis/mean`, `tis/masked` as IcePop's, and `icepop/low`, `icepop/high`: the band in force."""
    w, (lo, hi) = adaptive_icepop_weights(
        inputs.old_log_prob, inputs.rollout_log_prob, inputs.mask,
        band=options.icepop, mask_frac=options.icepop_mask_frac,
    )  # fmt: skip
    metrics = masked_metrics(w, inputs.mask)
    if metrics:
        metrics |= {"icepop/low": lo, "icepop/high": hi}
    return Correction(w, None, metrics)
