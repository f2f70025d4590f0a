"""Per-token policy entropy from logits, in chunks so memory stays bounded for large vocabularies.

`H = logsumexp(z) - sum(softmax(z) * z)` (as verl's `entropy_from_logits`), computed in fp32 over
`chunk_size` token rows at a time. Only valid tokens (mask = 1) are computed; padding gets 0. The
gradient is analytic, `dH/dz = -p * (log p + H)`, recomputed chunk by chunk in the backward pass, so
neither pass holds more than one chunk's [chunk, V] fp32 intermediates (no saved softmax of [B, T, V]).
"""

from __future__ import annotations

import torch

from fp8rl.rl._checks import check_mask

NEG_LARGE = -1e30  # stands in for -inf logits (masked vocabulary) so 0 * -inf never makes a NaN


def _chunk_log_softmax(flat: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    z = flat.index_select(0, rows).float()
    z = torch.where(z == float("-inf"), torch.full_like(z, NEG_LARGE), z)
    return z - torch.logsumexp(z, dim=-1, keepdim=True)


class _ChunkedEntropy(torch.autograd.Function):
    """Entropy of the rows `rows` of `flat` [N, V]; saves only `flat` (the caller's logits), the row
    indices and the [n] result for backward."""

    @staticmethod
    def forward(ctx, flat: torch.Tensor, rows: torch.Tensor, chunk_size: int) -> torch.Tensor:
        out = torch.empty(rows.numel(), dtype=torch.float32, device=flat.device)
        for start in range(0, rows.numel(), chunk_size):
            logp = _chunk_log_softmax(flat, rows[start : start + chunk_size])
            out[start : start + chunk_size] = -(logp.exp() * logp).sum(dim=-1)
        ctx.save_for_backward(flat, rows, out)
        ctx.chunk_size = chunk_size
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        flat, rows, h = ctx.saved_tensors
        grad = torch.zeros_like(flat)
        for start in range(0, rows.numel(), ctx.chunk_size):
            idx = rows[start : start + ctx.chunk_size]
            logp = _chunk_log_softmax(flat, idx)
            sl = slice(start, start + ctx.chunk_size)
            g = -logp.exp() * (logp + h[sl, None]) * grad_out[sl, None]
            grad.index_copy_(0, idx, g.to(grad.dtype))
        return grad, None, None


def entropy_from_logits(
    logits: torch.Tensor, mask: torch.Tensor | None = None, *, chunk_size: int = 1024
) -> torch.Tensor:
    """Entropy [B, T] (fp32, nats) of the categorical distributions given by `logits` [B, T, V].

    Rows where `mask` is 0 are skipped and return 0 (and get zero gradient). NaN logits give NaN
    entropy at that token (the trainer's divergence check reports it); -inf logits are allowed
    (probability 0).
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
    rows = m.reshape(-1).nonzero().squeeze(-1)
    h = _ChunkedEntropy.apply(logits.reshape(b * t, v), rows, chunk_size)
    out = torch.zeros(b * t, dtype=torch.float32, device=logits.device)
    return out.index_put((rows,), h).reshape(b, t)
