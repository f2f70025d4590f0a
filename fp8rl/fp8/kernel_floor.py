"""A bf16 inference engine's own rounding: the output of a GEMM computed by another kernel.

Two bf16 stacks that run the same weights on the same tokens still differ in their last bits: the
rollout engine's GEMMs sum their fp32 partial products in another order (other tiles, split-K, another
library), so an output that lies near a rounding boundary of bf16 rounds to the neighbouring bf16 value
in one engine and not in the other, and those one-ulp differences compound over layers and tokens. That
is the floor of the trainer-vs-rollout mismatch of a real BF16 RL stack (docs/mismatch.md).

`kernel_floor(y, scale, salt)` models it on a GEMM's fp32 output before its bf16 rounding:
`y + scale · u · ulp(y)`, with `ulp(y)` the spacing of bf16 values at `y` (2^(e-7) for |y| in
[2^e, 2^(e+1)); 0 for y = 0) and `u` uniform in [-1/2, 1/2), a hash of y's fp32 bits, the output's
column and `salt` (the layer), in about a dozen elementwise int32 operations per output. At `scale` ≤ 1
the bf16 rounding that follows moves an output to the neighbouring bf16 value only when it lies within
`scale`/2 ulp of a rounding boundary (a share `scale`/4 of the outputs), as another summation order
does; a larger `scale` stands in for more of it than one GEMM of the model shows (more layers, more
GEMMs per token, longer sequences than the model at hand has), and is what a target KL search sets.
The move is three IEEE operations (`u·scale`, times the power of two `ulp(y)`, plus `y`), none fused, so
its bits do not depend on the CPU's vector unit.

The perturbation is deterministic (the same output of the same layer always moves the same way, as a
fixed kernel does), needs no random state (a resumed run computes the same bits) and is independent
across outputs. What it does not model: differences that are correlated across outputs or tokens
(another attention kernel's softmax, a fused norm, a batch-size-dependent reduction, logits computed in
another precision), which can be larger and heavier-tailed than independent ulp flips.
"""

from __future__ import annotations

import torch

# odd 32-bit multipliers (murmur3's and xxhash's), as int32: the products wrap modulo 2^32, as the
# int32 kernels of torch compute them on every device
_K_BITS, _K_COL, _K_MIX = (k - (1 << 32) if k >= 1 << 31 else k for k in (0x9E3779B1, 0x85EBCA77, 0x2C1B3C6D))
_K_SALT = 0xC2B2AE35


def _wrap32(x: torch.Tensor) -> torch.Tensor:
    """An int64 tensor's values modulo 2^32, as int32 (two's complement)."""
    x = x & 0xFFFFFFFF
    return torch.where(x >= 1 << 31, x - (1 << 32), x).to(torch.int32)


def _uniform_hash(y: torch.Tensor, salt: int) -> torch.Tensor:
    """A value in [-1/2, 1/2) per element of the fp32 tensor `y` (multiples of 2^-24), a function of its
    bits, its index in the last dimension and `salt` only: a multiply-xorshift hash in int32."""
    n = y.shape[-1]
    col = _wrap32(
        torch.arange(n, device=y.device, dtype=torch.int64) * _K_COL + (salt * _K_SALT & 0xFFFFFFFF)
    )
    h = y.view(torch.int32) * _K_BITS
    h += col
    h ^= (h >> 16) & 0xFFFF  # logical shifts: the arithmetic shift's sign bits masked off
    h *= _K_MIX
    h ^= (h >> 13) & 0x7FFFF
    u = ((h >> 8) & 0xFFFFFF).to(torch.float32)
    return u.mul_(2.0**-24).sub_(0.5)


def bf16_ulp(y: torch.Tensor) -> torch.Tensor:
    """The spacing of bf16 values at each element of the fp32 tensor `y`: 2^(e-7) for |y| in
    [2^e, 2^(e+1)), from y's exponent bits; 0 where |y| < 2^-119 (zero and fp32's subnormals)."""
    e = (y.view(torch.int32) & 0x7F800000) - (7 << 23)
    return e.clamp_(min=0).view(torch.float32)


def kernel_floor(y: torch.Tensor, scale: float, salt: int = 0) -> torch.Tensor:
    """`y` (a GEMM's fp32 output, before its bf16 rounding) moved by `scale · u · ulp(y)` (module
    docstring); `y` itself when `scale` is 0."""
    if scale < 0:
        raise ValueError(f"scale: must be >= 0, got {scale}")
    if scale == 0:
        return y
    y32 = y.float()
    move = _uniform_hash(y32, salt).mul_(float(scale)).mul_(bf16_ulp(y32))  # the last factor: exact
    return (y32 + move).to(y.dtype)
