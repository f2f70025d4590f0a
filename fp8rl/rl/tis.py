"""Truncated importance sampling (Yao et al. 2025) for the rollout/trainer mismatch, with an optional
IcePop-style mask.

The rollout engine samples from pi_rollout, the trainer scores the same tokens as pi_old; the weight
`pi_old / pi_rollout`, truncated at `cap`, corrects the policy gradient for the difference. It is a
constant of the loss (detached), as in verl's rollout correction (`tis_imp_ratio_cap`).
"""

from __future__ import annotations

import torch

from fp8rl.rl._checks import LOG_RATIO_CLAMP, check_finite, check_mask, check_same_shape, masked_mean
from fp8rl.vocabulary import TIS_LEVELS


def _raw_ratio(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, m: torch.Tensor, level: str, fn: str
) -> torch.Tensor:
    """Untruncated IS ratio [B, T] (0 at padding): per token, or one per sequence (the product of its
    token ratios, i.e. exp of the summed log-ratio) broadcast over its tokens."""
    if level not in TIS_LEVELS:
        raise ValueError(f"{fn}: unknown level {level!r}; allowed: {', '.join(TIS_LEVELS)}")
    check_same_shape(fn, "response_mask", m, old_log_prob=old_log_prob, rollout_log_prob=rollout_log_prob)
    check_finite(fn, "old_log_prob", old_log_prob, m)
    check_finite(fn, "rollout_log_prob", rollout_log_prob, m)
    d = old_log_prob.detach() - rollout_log_prob.detach()
    d = torch.where(m, d, torch.zeros_like(d))
    if level == "sequence":
        d = d.sum(dim=-1, keepdim=True).expand_as(d)
    ratio = torch.exp(d.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return torch.where(m, ratio, torch.zeros_like(ratio))


def _check_options(cap: float, icepop: tuple[float, float] | None, fn: str) -> None:
    if not cap > 0:
        raise ValueError(f"{fn}: cap must be > 0, got {cap}")
    if icepop is not None:
        lo, hi = icepop
        if not 0 <= lo < hi:
            raise ValueError(f"{fn}: icepop must be (low, high) with 0 <= low < high, got {icepop}")


def tis_weights(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    cap: float = 2.0,
    level: str = "token",
    icepop: tuple[float, float] | None = None,
) -> torch.Tensor:
    """Detached TIS weights [B, T]: `min(exp(old - rollout), cap)` per token (`level="token"`), or per
    sequence from the summed log-ratio (`level="sequence"`); 0 at padding.

    `icepop=(low, high)`: weights whose untruncated ratio lies outside [low, high] are set to 0, so those
    tokens drop out of the gradient (IcePop's two-sided mask); the others keep their truncated weight.
    """
    fn = "tis_weights"
    m = check_mask(response_mask, fn)
    _check_options(cap, icepop, fn)
    raw = _raw_ratio(old_log_prob, rollout_log_prob, m, level, fn)
    w = torch.clamp(raw, max=cap)
    if icepop is not None:
        lo, hi = icepop
        w = torch.where((raw >= lo) & (raw <= hi), w, torch.zeros_like(w))
    return w


def tis_stats(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    cap: float = 2.0,
    level: str = "token",
    icepop: tuple[float, float] | None = None,
) -> dict[str, float]:
    """`tis/mean` (mean weight over valid tokens), `tis/clipped` (fraction of valid tokens whose ratio
    exceeded `cap` and was truncated) and, with `icepop`, `tis/masked` (fraction zeroed by the mask).
    Empty when there is no valid token."""
    fn = "tis_stats"
    m = check_mask(response_mask, fn)
    if int(m.sum()) == 0:
        return {}
    _check_options(cap, icepop, fn)
    raw = _raw_ratio(old_log_prob, rollout_log_prob, m, level, fn)
    w = tis_weights(old_log_prob, rollout_log_prob, m, cap=cap, level=level, icepop=icepop)
    out = {
        "tis/mean": float(masked_mean(w, m)),
        "tis/clipped": float(masked_mean((raw > cap).float(), m)),
    }
    if icepop is not None:
        lo, hi = icepop
        out["tis/masked"] = float(masked_mean(((raw < lo) | (raw > hi)).float(), m))
    return out
