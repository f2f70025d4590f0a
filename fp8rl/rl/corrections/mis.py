"""`mis` (masked IS; NeMo-RL's seq-mask-tis, slime's MIS): a sequence whose geometric-mean ratio
`exp(mean_t d_t)` lies outside the band `[low, high]` (`tis.mis`) is dropped from the loss and its token
counts; the kept ones get `min(r_t, cap)`."""

from __future__ import annotations

import math

import torch

from fp8rl.rl._checks import masked_mean
from fp8rl.rl.corrections._registry import (
    Correction,
    CorrectionInputs,
    CorrectionOptions,
    check_band,
    log_ratio,
    register_correction,
)
from fp8rl.rl.tis import tis_ratio, tis_stats, tis_weights
from fp8rl.vocabulary import MIS_BAND


def mis_keep(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    band: tuple[float, float] = MIS_BAND,
) -> torch.Tensor:
    """Masked IS's sequence mask [B] (bool): True where the geometric-mean ratio `exp(mean_t d_t)` over the
    sequence's valid tokens lies in `[low, high]` (compared in log space); a sequence without valid
    tokens is kept."""
    fn = "mis_keep"
    lo, hi = check_band(band, fn, positive=True)
    d, m = log_ratio(old_log_prob, rollout_log_prob, response_mask, fn)
    n = m.sum(dim=-1)
    mean_d = d.sum(dim=-1) / n.clamp(min=1)
    inside = (mean_d >= math.log(lo)) & (mean_d <= math.log(hi))
    return inside | (n == 0)


@register_correction("mis")
def masked_is(inputs: CorrectionInputs, options: CorrectionOptions) -> Correction:
    old, rollout, m, cap = inputs.old_log_prob, inputs.rollout_log_prob, inputs.mask, options.cap
    keep = mis_keep(old, rollout, m, band=options.mis)
    w = tis_weights(old, rollout, m, cap=cap, level="token")
    kept = m & keep[:, None]
    metrics = {}
    if int(m.sum()):
        metrics = tis_stats(tis_ratio(old, rollout, kept), kept, cap=cap) if int(kept.sum()) else {}
        metrics["tis/masked"] = float(masked_mean((~kept).float(), m))
        rows = m.any(dim=-1)
        metrics["tis/seq_masked"] = float((~keep[rows]).float().mean())
    return Correction(torch.where(kept, w, torch.zeros_like(w)), keep, metrics)
