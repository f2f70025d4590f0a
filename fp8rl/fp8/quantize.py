"""Scaled FP8 quantization at five granularities: amax → scale → saturated cast (torchao's split:
`tensor_to_amax` → `amax_to_scale` → the saturating cast).

`quantize(x, fmt, granularity)` returns `(q, scale)` with `q` in the FP8 dtype and `scale` in fp32 such
that `x ≈ q / scale` (torchao's convention; `torch._scaled_mm` takes the reciprocal). Granularities:

- `tensorwise`: one scale, shape `()`.
- `rowwise`: one scale per row, amax over the last dim; scale shape `x.shape[:-1] + (1,)`.
- `block1d`: 1×`block` tiles along the last dim (DeepSeek-V3 activations); scale `x.shape[:-1] + (nb,)`.
- `block2d`: `block`×`block` tiles of a 2-D tensor (DeepSeek-V3 weights); scale `(mb, nb)`.
- `mx`: 1×32 tiles along the last dim with E8M0 power-of-two scales per the OCP MX v1.0 spec
  (`X = 2^(floor(log2 amax) - emax_elem)`, elements saturated); `block` is ignored, the spec fixes 32.
  The scale is returned as the fp32 power of two `1/X`, exponent clamped to E8M0's [-127, 127].

Shapes the block does not divide are zero-padded for the amax and the scale and cropped afterwards, so
`q` always has `x`'s shape. Scales: `fmt_max / max(amax, 1e-12)` computed in float64 then cast to fp32,
exactly as `torchao.float8.float8_utils.amax_to_scale`; `pow2_scales` rounds them down to a power of two
(`exp2(floor(log2(scale)))`, torchao's `round_scales_to_power_of_2`). A caller may pass `scale=` (delayed
scaling) instead of having it computed from `x`.

The public functions take the granularity by name and resolve it into a `Tiling` (fp8rl.fp8.tiling);
`quantize_tiled`, `fake_quantize_tiled` and `dequantize_tiled` take an already resolved one (an
`OperandSpec`'s), and `fake_quantize_tiled(..., compiled=True)` runs the fake quantization as one
`torch.compile`d kernel.
"""

from __future__ import annotations

import functools
import math

import torch

from fp8rl.fp8.formats import FP8Format, get_format, round_to_grid_
from fp8rl.fp8.tiling import TENSORWISE, Granularity, Tiling

EPS = 1e-12  # torchao.float8.float8_utils.EPS
_EMAX = {"e4m3": 8, "e5m2": 15}  # OCP MX v1.0 Table 1: exponent of the element format's largest normal


def amax_to_scale(amax: torch.Tensor, fmt: str | FP8Format, *, pow2_scales: bool = False) -> torch.Tensor:
    """fp32 scale `fmt_max / max(amax, eps)` (float64 arithmetic, as torchao), optionally rounded down to
    a power of two. NaN amax gives a NaN scale."""
    f = get_format(fmt)
    scale = (f.max / torch.clamp(amax.to(torch.float64), min=EPS)).to(torch.float32)
    if pow2_scales:
        scale = torch.exp2(torch.floor(torch.log2(scale)))
    return scale


def mx_scale(amax: torch.Tensor, fmt: str | FP8Format) -> torch.Tensor:
    """OCP MX v1.0 shared scale as an fp32 multiplier: `2^(emax_elem - floor(log2 amax))`, the exponent
    clamped to E8M0's [-127, 127]; an all-zero block gets the largest scale (its elements stay 0), a block
    holding NaN gets a NaN scale (the spec's NaN scale)."""
    f = get_format(fmt)
    amax = amax.to(torch.float32)
    _, exp = torch.frexp(amax)  # amax = m * 2^exp, m in [0.5, 1)  =>  floor(log2 amax) = exp - 1
    shared = torch.where(amax > 0, exp - 1 - _EMAX[f.name], torch.full_like(exp, -127))
    shared = torch.where(torch.isinf(amax), torch.full_like(exp, 127), shared).clamp(-127, 127)
    scale = torch.exp2(-shared.to(torch.float32))
    return torch.where(torch.isnan(amax), torch.full_like(scale, float("nan")), scale)


def _abs_max(x: torch.Tensor, dim: int | tuple[int, ...] | None = None) -> torch.Tensor:
    """max |x| (over `dim`, keepdim) without materialising |x|: max(-min, max). NaN propagates."""
    if dim is None:
        lo, hi = torch.aminmax(x)
    else:  # separate amin/amax: ~6x faster on CPU than aminmax over a dim
        lo, hi = x.amin(dim=dim, keepdim=True), x.amax(dim=dim, keepdim=True)
    return torch.maximum(-lo, hi)


def tensor_to_amax(x: torch.Tensor, tiling: Tiling = TENSORWISE) -> torch.Tensor:
    """max |x| per scale group of `tiling` (shaped as the scale, module docstring); the default is the
    whole tensor's amax, a 0-d tensor. NaN propagates."""
    g = tiling.granularity
    if g is Granularity.TENSORWISE:
        return _abs_max(x)
    if g is Granularity.ROWWISE:
        return _abs_max(x, -1)
    tiles = tiling.tiles(x)
    if g is Granularity.BLOCK2D:
        return _abs_max(tiles, (1, 3))[:, 0, :, 0]
    return _abs_max(tiles, -1).squeeze(-1)


def tensor_to_scale(x: torch.Tensor, fmt: str | FP8Format, tiling: Tiling) -> torch.Tensor:
    """The scale `quantize_tiled` computes for `x`: `amax_to_scale` of its amaxes, or `mx_scale` for MX."""
    amax = tensor_to_amax(x, tiling)
    if tiling.granularity is Granularity.MX:
        return mx_scale(amax, fmt)
    return amax_to_scale(amax, fmt, pow2_scales=tiling.pow2_scales)


def compute_scale(
    x: torch.Tensor,
    fmt: str | FP8Format = "e4m3",
    granularity: str = "tensorwise",
    *,
    block: int = 128,
    pow2_scales: bool = False,
) -> torch.Tensor:
    """The scale `quantize` would use for `x` (shapes as in the module docstring)."""
    tiling = Tiling(granularity, block, pow2_scales)
    tiling.check(x)
    return tensor_to_scale(x, fmt, tiling)


@functools.cache
def _saturates_natively(f: FP8Format, device_type: str) -> bool:
    """Whether torch's own cast to `f` on this device type already saturates (overflow and ±inf to
    ±max, as torch's CPU cast to float8_e4m3fn does); then the explicit clamp pass is skipped. Checked
    once per (format, device type) on values the clamp would change."""
    probe = torch.tensor([f.max * 1.04, f.max * 1.1, -1e30, float("inf"), float("-inf")], device=device_type)
    return torch.equal(probe.to(f.dtype).float(), probe.clamp(-f.max, f.max).to(f.dtype).float())


def _cast(y: torch.Tensor, f: FP8Format) -> torch.Tensor:
    """Saturating RNE cast of the fp32 tensor `y` (which may be modified in place)."""
    if not _saturates_natively(f, y.device.type):
        y = y.clamp_(-f.max, f.max)
    return y.to(f.dtype)


def _fused_fake_quant(
    y: torch.Tensor, s: torch.Tensor, fmax: float, floor_bits: int, shift: int
) -> torch.Tensor:
    """`round_to_grid_(y * s) / s` as one functional expression, for `torch.compile` to fuse."""
    y = (y * s).clamp(-fmax, fmax)
    e = torch.bitwise_and(y.view(torch.int32), 0x7F800000).clamp(min=floor_bits) + shift
    c = torch.copysign(e.view(torch.float32), y)
    return ((y + c) - c) / s


@functools.cache
def _fused_kernel():
    """`_fused_fake_quant` compiled by `torch.compile` (inductor, C++ on CPU), built on first use: measured
    ~1.3-1.7x a copy at 2048²-4096² instead of ~1.7-5.5x eagerly (benchmarks/fp8_quant.py --compile),
    for a compile of a few seconds per process and shape."""
    return torch.compile(_fused_fake_quant)


def _apply(
    x: torch.Tensor, scale: torch.Tensor, f: FP8Format, tiling: Tiling, *, back: bool, compiled: bool = False
) -> torch.Tensor:
    """Scale, saturate and cast `x` to FP8 (`back=False`), or scale, round to the FP8 grid in fp32 and
    divide by the scale again (`back=True`: fake quantization, `round_to_grid_`, or the compiled kernel
    with `compiled`)."""
    tiled = tiling.tiled
    y = tiling.tiles(x.to(torch.float32)) if tiled else x.to(torch.float32)
    s = tiling.tile_scale(scale) if tiled else scale
    if back and compiled:
        floor_bits = (127 + round(math.log2(f.min_normal))) << 23
        y = _fused_kernel()(y, s, f.max, floor_bits, (23 - f.mantissa_bits) << 23)
    else:
        y = y * s
        y = round_to_grid_(y, f).div_(s) if back else _cast(y, f)
    return tiling.untile(y, x.shape) if tiled else y


def _inner_contiguous(x: torch.Tensor, tiling: Tiling) -> torch.Tensor:
    """`x` with a unit-stride last dim for the per-row / per-tile reductions: reducing over a strided
    dim (a transposed operand in the backward GEMMs) is ~10x slower on CPU than one copy first."""
    if tiling.granularity is not Granularity.TENSORWISE and x.dim() and x.stride(-1) != 1:
        return x.contiguous()
    return x


def quantize_tiled(
    x: torch.Tensor, fmt: str | FP8Format, tiling: Tiling, *, scale: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`quantize` with the granularity already resolved into `tiling`."""
    f = get_format(fmt)
    tiling.check(x)
    x = _inner_contiguous(x, tiling)
    if scale is None:
        scale = tensor_to_scale(x, f, tiling)
    q = _apply(x, scale, f, tiling, back=False)
    return q.contiguous(), scale


def fake_quantize_tiled(
    x: torch.Tensor,
    fmt: str | FP8Format,
    tiling: Tiling,
    *,
    scale: torch.Tensor | None = None,
    compiled: bool = False,
    noise_scale: float = 1.0,
) -> torch.Tensor:
    """`fake_quantize` with the granularity already resolved into `tiling`; `compiled` runs the rounding
    as one `torch.compile`d kernel (same values); `noise_scale` s returns x + s * (Q(x) - x)
    (`amplify_error`)."""
    f = get_format(fmt)
    tiling.check(x)
    x = _inner_contiguous(x, tiling)
    if scale is None:
        scale = tensor_to_scale(x, f, tiling)
    return amplify_error(
        x, _apply(x, scale, f, tiling, back=True, compiled=compiled).to(x.dtype), noise_scale
    )


def amplify_error(x: torch.Tensor, x_q: torch.Tensor, noise_scale: float) -> torch.Tensor:
    """The FP8 noise dose of the mechanism and stress studies: `x + s * (x_q - x)`, the quantization
    error of `x_q` scaled by `s` (`x_q` itself, bit for bit, at s = 1). Not a real FP8 value for s != 1:
    those runs are emulated."""
    if noise_scale == 1.0:
        return x_q
    if not noise_scale > 0.0:
        raise ValueError(f"noise_scale: must be > 0, got {noise_scale}")
    return x + noise_scale * (x_q - x)


def dequantize_tiled(
    q: torch.Tensor, scale: torch.Tensor, tiling: Tiling, *, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """`dequantize` with the granularity already resolved into `tiling`."""
    if not tiling.tiled:
        return (q.to(torch.float32) / scale).to(dtype)
    tiles = tiling.tiles(q.to(torch.float32))
    return tiling.untile(tiles / tiling.tile_scale(scale), q.shape).to(dtype)


def quantize(
    x: torch.Tensor,
    fmt: str = "e4m3",
    granularity: str = "tensorwise",
    *,
    block: int = 128,
    pow2_scales: bool = False,
    scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize `x` to FP8: returns `(q, scale)`, `q` in the FP8 dtype with x's shape, `scale` fp32."""
    f = get_format(fmt)
    return quantize_tiled(x, f, Tiling(granularity, block, pow2_scales), scale=scale)


def dequantize(
    q: torch.Tensor,
    scale: torch.Tensor,
    granularity: str = "tensorwise",
    *,
    block: int = 128,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """`q / scale` in `dtype`, the scale broadcast over its tiles."""
    return dequantize_tiled(q, scale, Tiling(granularity, block), dtype=dtype)


def fake_quantize(
    x: torch.Tensor,
    fmt: str = "e4m3",
    granularity: str = "tensorwise",
    *,
    block: int = 128,
    pow2_scales: bool = False,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """`dequantize(quantize(x))` in x's dtype and shape, computed without the FP8 dtype round trip
    (`round_to_grid_`): equal values, except -0 may come back as +0."""
    f = get_format(fmt)
    return fake_quantize_tiled(x, f, Tiling(granularity, block, pow2_scales), scale=scale)
