"""Per-token policy entropy from logits, in chunks so memory stays bounded for large vocabularies.

`H = logsumexp(z) - sum(softmax(z) * z)` (as verl's `entropy_from_logits`), computed in fp32 over
`chunk_size` token rows at a time. Only valid tokens (mask = 1) are computed; padding gets 0. When the
logits require grad and span more than one chunk, each chunk runs under activation checkpointing, so
the backward pass also holds only one chunk's [chunk, V] intermediates at a time, not [B, T, V].
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from fp8rl.rl._checks import check_mask

NEG_LARGE = -1e30  # stands in for -inf logits (masked vocabulary) so 0 * -inf never makes a NaN


def _chunk_entropy(flat: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Entropy of the rows `rows` of `flat` [N, V]; the gather happens inside, so under checkpointing
    only `flat` (a view of the caller's logits) and the indices are saved, never a [chunk, V] copy."""
    z = flat.index_select(0, rows).float()
    z = torch.where(z == float("-inf"), torch.full_like(z, NEG_LARGE), z)
    lse = torch.logsumexp(z, dim=-1)
    p = torch.softmax(z, dim=-1)
    return lse - (p * z).sum(dim=-1)


def entropy_from_logits(
    logits: torch.Tensor, mask: torch.Tensor | None = None, *, chunk_size: int = 1024
) -> torch.Tensor:
    """Entropy [B, T] (fp32, nats) of the categorical distributions given by `logits` [B, T, V].

    Rows where `mask` is 0 are skipped and return 0. NaN logits give NaN entropy at that token (the
    trainer's divergence check reports it); -inf logits are allowed (probability 0).
    """
    if logits.dim() != 3:
        raise ValueError(f"entropy_from_logits: logits must be [B, T, V], got shape {tuple(logits.shape)}")
    if chunk_size < 1:
        raise ValueError(f"entropy_from_logits: chunk_size must be >= 1, got {chunk_size}")
    b, t, v = logits.shape
    if mask is None:
        m = torch.ones(b, t, dtype=torch.bool, device=logits.device)
    else:
        m = check_mask(mask, "entropy_from_logits", "mask")
        if m.shape != (b, t):
            raise ValueError(f"entropy_from_logits: mask has shape {tuple(m.shape)}, logits {(b, t, v)}")
    flat = logits.reshape(b * t, v)
    rows = m.reshape(-1).nonzero().squeeze(-1)
    # checkpointing costs a recompute (and ~seconds on its first call): only worth it beyond one chunk
    use_ckpt = logits.requires_grad and torch.is_grad_enabled() and rows.numel() > chunk_size
    parts = []
    for start in range(0, rows.numel(), chunk_size):
        idx = rows[start : start + chunk_size]
        if use_ckpt:
            parts.append(checkpoint(_chunk_entropy, flat, idx, use_reentrant=False))
        else:
            parts.append(_chunk_entropy(flat, idx))
    out = torch.zeros(b * t, dtype=torch.float32, device=logits.device)
    if parts:
        out = out.index_put((rows,), torch.cat(parts))
    return out.reshape(b, t)
