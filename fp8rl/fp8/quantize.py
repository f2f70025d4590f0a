"""Scaled FP8 quantization at five granularities: amax → scale → saturated cast (torchao's split).

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
"""

from __future__ import annotations

import math
import os

import torch

from fp8rl.fp8.formats import FP8Format, check_float, get_format, round_to_grid_

GRANULARITIES = ("tensorwise", "rowwise", "block1d", "block2d", "mx")
EPS = 1e-12  # torchao.float8.float8_utils.EPS
MX_BLOCK = 32
_EMAX = {"e4m3": 8, "e5m2": 15}  # OCP MX v1.0 Table 1: exponent of the element format's largest normal


def _check_args(x: torch.Tensor, granularity: str, block: int) -> None:
    check_float(x, "x")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity: unknown {granularity!r}; allowed: {', '.join(GRANULARITIES)}")
    if not isinstance(block, int) or block <= 0:
        raise ValueError(f"block: must be a positive int, got {block!r}")
    if granularity == "block2d" and x.dim() != 2:
        raise ValueError(f"x: granularity 'block2d' needs a 2-D tensor, got shape {tuple(x.shape)}")
    if granularity in ("rowwise", "block1d", "mx") and x.dim() < 1:
        raise ValueError(f"x: granularity {granularity!r} needs at least 1 dim, got a scalar")


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


def abs_max(x: torch.Tensor, dim: int | tuple[int, ...] | None = None) -> torch.Tensor:
    """max |x| (over `dim`, keepdim) without materialising |x|: max(-min, max). NaN propagates."""
    if dim is None:
        lo, hi = torch.aminmax(x)
    else:  # separate amin/amax: ~6x faster on CPU than aminmax over a dim
        lo, hi = x.amin(dim=dim, keepdim=True), x.amax(dim=dim, keepdim=True)
    return torch.maximum(-lo, hi)


def _pad_last(x: torch.Tensor, block: int) -> torch.Tensor:
    k = x.shape[-1]
    pad = (-k) % block
    return torch.nn.functional.pad(x, (0, pad)) if pad else x


def _tiles(x: torch.Tensor, granularity: str, block: int) -> torch.Tensor:
    """A padded view of `x` whose amax over the tile dims gives one value per scale:
    block1d/mx → `[..., nb, block]`; block2d → `[mb, block, nb, block]`."""
    if granularity == "block2d":
        m, n = x.shape
        pm, pn = (-m) % block, (-n) % block
        if pm or pn:
            x = torch.nn.functional.pad(x, (0, pn, 0, pm))
        return x.reshape(x.shape[0] // block, block, x.shape[1] // block, block)
    x = _pad_last(x, block)
    return x.reshape(*x.shape[:-1], x.shape[-1] // block, block)


def _untile(t: torch.Tensor, shape: torch.Size, granularity: str) -> torch.Tensor:
    """Inverse of `_tiles`: back to the padded 2-D/N-D layout, cropped to `shape`."""
    if granularity == "block2d":
        t = t.reshape(t.shape[0] * t.shape[1], t.shape[2] * t.shape[3])
        return t[: shape[0], : shape[1]]
    t = t.reshape(*t.shape[:-2], t.shape[-2] * t.shape[-1])
    return t[..., : shape[-1]]


def _tile_scale(scale: torch.Tensor, granularity: str) -> torch.Tensor:
    """Scale shaped to broadcast against `_tiles`' view."""
    if granularity == "block2d":
        return scale[:, None, :, None]
    return scale.unsqueeze(-1)


def _block_of(granularity: str, block: int) -> int:
    return MX_BLOCK if granularity == "mx" else block


def compute_scale(
    x: torch.Tensor,
    fmt: str | FP8Format = "e4m3",
    granularity: str = "tensorwise",
    *,
    block: int = 128,
    pow2_scales: bool = False,
) -> torch.Tensor:
    """The scale `quantize` would use for `x` (shapes as in the module docstring)."""
    _check_args(x, granularity, block)
    if granularity == "tensorwise":
        amax = abs_max(x)
    elif granularity == "rowwise":
        amax = abs_max(x, -1)
    else:
        tiles = _tiles(x, granularity, _block_of(granularity, block))
        amax = abs_max(tiles, (1, 3)) if granularity == "block2d" else abs_max(tiles, -1)
        amax = amax[:, 0, :, 0] if granularity == "block2d" else amax.squeeze(-1)
    if granularity == "mx":
        return mx_scale(amax, fmt)
    return amax_to_scale(amax, fmt, pow2_scales=pow2_scales)


_NATIVE_SATURATION: dict[tuple[str, str], bool] = {}


def _saturates_natively(f: FP8Format, device: torch.device) -> bool:
    """Whether torch's own cast to `f` on this device type already saturates (overflow and ±inf to
    ±max, as torch's CPU cast to float8_e4m3fn does); then the explicit clamp pass is skipped. Checked
    once per (format, device type) on values the clamp would change."""
    key = (f.name, device.type)
    if key not in _NATIVE_SATURATION:
        probe = torch.tensor([f.max * 1.04, f.max * 1.1, -1e30, float("inf"), float("-inf")], device=device)
        _NATIVE_SATURATION[key] = torch.equal(
            probe.to(f.dtype).float(), probe.clamp(-f.max, f.max).to(f.dtype).float()
        )
    return _NATIVE_SATURATION[key]


def _cast(y: torch.Tensor, f: FP8Format) -> torch.Tensor:
    """Saturating RNE cast of the fp32 tensor `y` (which may be modified in place)."""
    if not _saturates_natively(f, y.device):
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


_compiled_fused = None
_use_compile = os.environ.get("FP8RL_FP8_COMPILE", "0") == "1"


def set_compile(enabled: bool) -> None:
    """Fuse fake quantization into one `torch.compile`d kernel (inductor, C++ on CPU): measured ~1.3-1.7x
    a copy at 2048²-4096² instead of ~1.7-5.5x eagerly (benchmarks/fp8_quant.py --compile), for a
    compile of a few seconds per process and shape. Off by default (the smoke tier's tensors are small
    and its runs short); `FP8RL_FP8_COMPILE=1` turns it on."""
    global _use_compile
    _use_compile = bool(enabled)


def _apply(x: torch.Tensor, scale: torch.Tensor, granularity: str, block: int, f: FP8Format, back: bool):
    """Scale, saturate and cast `x` to FP8 (`back=False`), or scale, round to the FP8 grid in fp32 and
    divide by the scale again (`back=True`: fake quantization, `round_to_grid_`)."""
    global _compiled_fused
    tiled = granularity not in ("tensorwise", "rowwise")
    y = _tiles(x.to(torch.float32), granularity, block) if tiled else x.to(torch.float32)
    s = _tile_scale(scale, granularity) if tiled else scale
    if back and _use_compile:
        if _compiled_fused is None:
            _compiled_fused = torch.compile(_fused_fake_quant)
        floor_bits = (127 + round(math.log2(f.min_normal))) << 23
        y = _compiled_fused(y, s, f.max, floor_bits, (23 - f.mantissa_bits) << 23)
    else:
        y = y * s
        y = round_to_grid_(y, f).div_(s) if back else _cast(y, f)
    return _untile(y, x.shape, granularity) if tiled else y


def _inner_contiguous(x: torch.Tensor, granularity: str) -> torch.Tensor:
    """`x` with a unit-stride last dim for the per-row / per-tile reductions: reducing over a strided
    dim (a transposed operand in the backward GEMMs) is ~10x slower on CPU than one copy first."""
    if granularity != "tensorwise" and x.dim() and x.stride(-1) != 1:
        return x.contiguous()
    return x


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
    _check_args(x, granularity, block)
    x = _inner_contiguous(x, granularity)
    if scale is None:
        scale = compute_scale(x, f, granularity, block=block, pow2_scales=pow2_scales)
    q = _apply(x, scale, granularity, _block_of(granularity, block), f, back=False)
    return q.contiguous(), scale


def dequantize(
    q: torch.Tensor,
    scale: torch.Tensor,
    granularity: str = "tensorwise",
    *,
    block: int = 128,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """`q / scale` in `dtype`, the scale broadcast over its tiles."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity: unknown {granularity!r}; allowed: {', '.join(GRANULARITIES)}")
    if granularity in ("tensorwise", "rowwise"):
        return (q.to(torch.float32) / scale).to(dtype)
    tiles = _tiles(q.to(torch.float32), granularity, _block_of(granularity, block))
    return _untile(tiles / _tile_scale(scale, granularity), q.shape, granularity).to(dtype)


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
    _check_args(x, granularity, block)
    x = _inner_contiguous(x, granularity)
    if scale is None:
        scale = compute_scale(x, f, granularity, block=block, pow2_scales=pow2_scales)
    return _apply(x, scale, granularity, _block_of(granularity, block), f, back=True).to(x.dtype)
