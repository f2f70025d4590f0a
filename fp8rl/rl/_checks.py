"""Input checks shared by the objectives: shapes, 0/1 masks, non-finite values.

Every public function of `fp8rl.rl` validates its inputs here first, so bad input fails with a message
that names the argument instead of turning into a silent NaN loss. Non-finite values are only an error at
valid (mask = 1) positions; padding may hold anything and is zeroed by `masked_fill_padding`.
"""

from __future__ import annotations

import torch

LOG_RATIO_CLAMP = 20.0  # as verl: exp() of a log-ratio beyond +-20 is clamped for stability


def check_mask(mask: torch.Tensor, fn: str, name: str = "response_mask") -> torch.Tensor:
    """Return `mask` as a bool tensor; ValueError unless it is 2-D [B, T] and holds only 0 and 1."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dim() != 2:
        raise ValueError(f"{fn}: {name} must be [B, T], got shape {tuple(mask.shape)}")
    if mask.dtype == torch.bool:
        return mask
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"{fn}: {name} must hold only 0 and 1")
    return mask != 0


def check_same_shape(fn: str, ref_name: str, ref: torch.Tensor, **others: torch.Tensor | None) -> None:
    """ValueError naming the first tensor in `others` whose shape differs from `ref`'s."""
    for name, t in others.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.shape != ref.shape:
            raise ValueError(
                f"{fn}: {name} has shape {tuple(t.shape)} but {ref_name} has shape {tuple(ref.shape)}"
            )


def check_finite(fn: str, name: str, t: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    """ValueError if `t` holds NaN/inf where `mask` is True (everywhere when mask is None)."""
    bad = ~torch.isfinite(t.detach())
    if mask is not None:
        bad = bad & mask
    n = int(bad.sum())
    if n:
        where = "at valid tokens" if mask is not None else "entries"
        raise ValueError(f"{fn}: {name} has {n} non-finite (NaN/inf) {where}")


def per_token(fn: str, name: str, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Broadcast a per-sequence [B] tensor to [B, T]; pass a [B, T] one through; else ValueError."""
    if x.dim() == 1 and x.shape[0] == mask.shape[0]:
        return x.unsqueeze(-1).expand(mask.shape)
    if x.shape == mask.shape:
        return x
    raise ValueError(
        f"{fn}: {name} must be [B] or [B, T] matching response_mask {tuple(mask.shape)}, got {tuple(x.shape)}"
    )


def masked_fill_padding(x: torch.Tensor, mask: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """`x` with padding replaced by `value`, so NaN/inf there can reach neither values nor gradients."""
    return torch.where(mask, x, torch.full_like(x, value))


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `x` over True positions of `mask` (0-dim); NaN-free padding is the caller's job."""
    return torch.where(mask, x, torch.zeros_like(x)).sum() / mask.sum()


def masked_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`exp(log_prob - old_log_prob)` (log-ratio clamped to ±LOG_RATIO_CLAMP) on valid tokens, exactly 1 on
    masked ones (`mask` 0/1 float), so quantiles and clip fractions over padding stay neutral."""
    return torch.exp((log_prob - old_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)) * mask + (1 - mask)
