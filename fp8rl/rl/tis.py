"""Truncated importance sampling (Yao et al. 2025) for the rollout/trainer mismatch (the other
corrections, IcePop and masked IS, are in fp8rl.rl.corrections).

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
    """`tis_ratio` of the checked mask `m`; `fn` names the caller in the errors."""
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


def tis_ratio(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    level: str = "token",
) -> torch.Tensor:
    """The untruncated IS ratio [B, T] `exp(old - rollout)`, detached, 0 at padding: per token, or one per
    sequence (the product of its token ratios, i.e. exp of the summed log-ratio) broadcast over its tokens."""
    return _raw_ratio(
        old_log_prob, rollout_log_prob, check_mask(response_mask, "tis_ratio"), level, "tis_ratio"
    )


def _check_options(cap: float, fn: str) -> None:
    if not cap > 0:
        raise ValueError(f"{fn}: cap must be > 0, got {cap}")


def tis_weights(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    cap: float = 2.0,
    level: str = "token",
) -> torch.Tensor:
    """Detached TIS weights [B, T]: `min(exp(old - rollout), cap)` per token (`level="token"`), or per
    sequence from the summed log-ratio (`level="sequence"`); 0 at padding."""
    fn = "tis_weights"
    m = check_mask(response_mask, fn)
    _check_options(cap, fn)
    raw = _raw_ratio(old_log_prob, rollout_log_prob, m, level, fn)
    return torch.clamp(raw, max=cap)


def tis_stats(ratio: torch.Tensor, response_mask: torch.Tensor, *, cap: float = 2.0) -> dict[str, float]:
    """`tis/mean` (mean weight `min(ratio, cap)` over valid tokens) and `tis/clipped` (fraction of valid
    tokens whose ratio exceeded `cap` and was truncated), from the untruncated `tis_ratio`. Empty when
    there is no valid token."""
    fn = "tis_stats"
    m = check_mask(response_mask, fn)
    if int(m.sum()) == 0:
        return {}
    _check_options(cap, fn)
    return {
        "tis/mean": float(masked_mean(torch.clamp(ratio, max=cap), m)),
        "tis/clipped": float(masked_mean((ratio > cap).float(), m)),
    }
