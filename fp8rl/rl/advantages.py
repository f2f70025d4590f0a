"""Outcome advantages and DAPO's batch shaping: GRPO group normalization, dynamic sampling, overlong
punishment.

Rewards are one scalar per response, shape [B], with the `group_size` samples of one prompt contiguous
(rows g*group_size ... (g+1)*group_size - 1 belong to prompt g).
"""

from __future__ import annotations

import torch


def _grouped(rewards: torch.Tensor, group_size: int, fn: str) -> torch.Tensor:
    if not isinstance(rewards, torch.Tensor) or rewards.dim() != 1:
        shape = tuple(rewards.shape) if isinstance(rewards, torch.Tensor) else type(rewards).__name__
        raise ValueError(f"{fn}: rewards must be a 1-D tensor [B], got {shape}")
    if not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"{fn}: group_size must be a positive int, got {group_size!r}")
    if rewards.numel() == 0 or rewards.numel() % group_size:
        raise ValueError(
            f"{fn}: {rewards.numel()} rewards do not split into groups of group_size {group_size}"
        )
    n_bad = int((~torch.isfinite(rewards)).sum())
    if n_bad:
        raise ValueError(f"{fn}: rewards hold {n_bad} non-finite (NaN/inf) values")
    return rewards.reshape(-1, group_size)


def grpo_advantages(
    rewards: torch.Tensor, group_size: int, *, norm_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO outcome advantages [B]: `(r - group mean) / (group std + eps)`, or `r - group mean`
    when `norm_std` is False (Dr. GRPO).

    The std is unbiased (N-1), as `torch.std` and verl's `compute_grpo_outcome_advantage`; a group of one
    sample gets mean 0 and std 1 there, and the same here. Computed in fp32 (float64 stays float64)
    without gradient.
    """
    g = _grouped(rewards, group_size, "grpo_advantages").detach()
    g = g.to(torch.promote_types(g.dtype, torch.float32))
    if group_size == 1:
        mean = torch.zeros_like(g)
        std = torch.ones_like(g)
    else:
        mean = g.mean(dim=1, keepdim=True)
        std = g.std(dim=1, keepdim=True)
    adv = g - mean
    if norm_std:
        adv = adv / (std + eps)
    return adv.reshape(-1)


def dynamic_sampling_mask(rewards: torch.Tensor, group_size: int) -> tuple[torch.Tensor, int]:
    """DAPO dynamic sampling: keep only groups whose rewards are not all equal.

    A group where every sample got the same reward has zero advantage everywhere and contributes no
    gradient. Returns `(keep [B] bool, n_dropped_groups)`; a group of one sample is always kept (as
    verl's DAPO filter does).
    """
    g = _grouped(rewards, group_size, "dynamic_sampling_mask")
    if group_size == 1:
        return torch.ones(g.shape[0], dtype=torch.bool, device=g.device), 0
    varied = (g != g[:, :1]).any(dim=1)
    keep = varied.unsqueeze(1).expand_as(g).reshape(-1)
    return keep, int((~varied).sum())


def overlong_penalty(
    response_lengths: torch.Tensor, max_len: int, buffer_len: int, factor: float
) -> torch.Tensor:
    """DAPO soft overlong punishment [B], added to the task reward.

    With `expected = max_len - buffer_len`, a response of length `l` gets
    `min(-(l - expected) / buffer_len * factor, 0)`: nothing up to `expected` tokens, then a linear ramp
    down to `-factor` at `max_len` (the semantics of verl's DAPO reward manager). `buffer_len = 0`
    disables it (all zeros).
    """
    lengths = torch.as_tensor(response_lengths)
    if lengths.dim() != 1:
        raise ValueError(f"overlong_penalty: response_lengths must be [B], got {tuple(lengths.shape)}")
    if max_len <= 0 or buffer_len < 0 or buffer_len > max_len:
        raise ValueError(
            f"overlong_penalty: need 0 <= buffer_len <= max_len and max_len > 0, "
            f"got max_len={max_len}, buffer_len={buffer_len}"
        )
    if factor < 0:
        raise ValueError(f"overlong_penalty: factor must be >= 0, got {factor}")
    lengths = lengths.to(torch.float32)
    if buffer_len == 0:
        return torch.zeros_like(lengths)
    exceed = lengths - (max_len - buffer_len)
    return torch.clamp(-exceed / buffer_len * factor, max=0.0) + 0.0  # + 0.0: no -0.0
