"""`icepop` (IcePop, arXiv 2510.18855): the token's ratio `r_t` as its weight inside the band
`[alpha, beta]` (`tis.icepop`), 0 outside: the token drops out of the gradient but stays in the token
count."""

from __future__ import annotations

import torch

from fp8rl.rl._checks import LOG_RATIO_CLAMP, masked_mean
from fp8rl.rl.corrections._registry import (
    Correction,
    CorrectionInputs,
    CorrectionOptions,
    check_band,
    log_ratio,
    register_correction,
)
from fp8rl.vocabulary import ICEPOP_BAND


def icepop_weights(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    band: tuple[float, float] = ICEPOP_BAND,
) -> torch.Tensor:
    """IcePop's weights [B, T]: `r_t = exp(old - rollout)` where `alpha <= r_t <= beta`, else 0; 0 at
    padding. Detached."""
    fn = "icepop_weights"
    lo, hi = check_band(band, fn, positive=False)
    d, m = log_ratio(old_log_prob, rollout_log_prob, response_mask, fn)
    r = torch.exp(d.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return torch.where(m & (r >= lo) & (r <= hi), r, torch.zeros_like(r))


def masked_metrics(w: torch.Tensor, m: torch.Tensor) -> dict[str, float]:
    """`tis/mean` and `tis/masked` of IcePop-style weights (empty without a valid token)."""
    if not int(m.sum()):
        return {}
    return {"tis/mean": float(masked_mean(w, m)), "tis/masked": float(masked_mean((w == 0).float(), m))}


@register_correction("icepop")
def icepop(inputs: CorrectionInputs, options: CorrectionOptions) -> Correction:
    w = icepop_weights(inputs.old_log_prob, inputs.rollout_log_prob, inputs.mask, band=options.icepop)
    return Correction(w, None, masked_metrics(w, inputs.mask))
