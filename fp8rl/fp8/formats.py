"""FP8 formats and the saturating, round-to-nearest-even cast.

Two OCP FP8 formats (docs/architecture.md#names): `e4m3` (torch `float8_e4m3fn`: no infinities, max 448, one NaN code)
and `e5m2` (torch `float8_e5m2`: IEEE-like, max 57344). `hybrid` is not a format but a recipe choice
(e4m3 forward, e5m2 gradients); `resolve_format` maps it to the format of one operand role.

Each format is registered here, where it is defined (`register_format`); `get_format` looks it up.
Its name is also in vocabulary `FP8_FORMATS`, the torch-free list the config checks `fp8.format`
against (a format is a torch dtype, so its definition cannot live on that floor); the registry refuses
a format outside it and this module checks at import that the two hold the same names.

The cast is torch's own conversion (round-to-nearest-even, bit-identical to `ml_dtypes`) preceded by a
clamp to ±max, so overflow and ±inf saturate to ±max in both formats (torchao's `to_fp8_saturated`
convention) and NaN stays NaN (`clamp` propagates NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fp8rl.vocabulary import FP8_FORMATS as FORMATS
from fp8rl.vocabulary import RECIPE_FORMATS


@dataclass(frozen=True)
class FP8Format:
    """One FP8 format: its name, torch dtype and largest finite value."""

    name: str
    dtype: torch.dtype
    max: float
    min_normal: float
    min_subnormal: float
    mantissa_bits: int


REGISTRY: dict[str, FP8Format] = {}


def register_format(fmt: FP8Format) -> FP8Format:
    """Register `fmt` under its name (one of vocabulary `FP8_FORMATS`; twice is an error); returns it."""
    if fmt.name not in FORMATS:
        raise ValueError(
            f"register_format: {fmt.name!r} is not in fp8rl.vocabulary.FP8_FORMATS; add it there"
        )
    if fmt.name in REGISTRY:
        raise ValueError(f"register_format: {fmt.name!r} is registered twice")
    REGISTRY[fmt.name] = fmt
    return fmt


E4M3 = register_format(FP8Format("e4m3", torch.float8_e4m3fn, 448.0, 2.0**-6, 2.0**-9, 3))
E5M2 = register_format(FP8Format("e5m2", torch.float8_e5m2, 57344.0, 2.0**-14, 2.0**-16, 2))
if set(REGISTRY) != set(FORMATS):
    raise ImportError(
        f"fp8rl.fp8.formats: registered {sorted(REGISTRY)}, vocabulary FP8_FORMATS {sorted(FORMATS)}"
    )


def get_format(fmt: str | FP8Format) -> FP8Format:
    """The `FP8Format` named `fmt` ("e4m3" or "e5m2"); ValueError naming `fmt` otherwise."""
    if isinstance(fmt, FP8Format):
        return fmt
    try:
        return REGISTRY[fmt]
    except (KeyError, TypeError):
        raise ValueError(f"fmt: unknown FP8 format {fmt!r}; allowed: {', '.join(FORMATS)}") from None


def resolve_format(fmt: str, role: str) -> FP8Format:
    """Format of one operand role ("forward" or "grad") under a recipe-level format.

    `hybrid` gives e4m3 for forward operands (activations, weights) and e5m2 for gradients, as
    Transformer Engine's `Format.HYBRID` and torchao's tensorwise recipe.
    """
    if fmt == "hybrid":
        return E5M2 if role == "grad" else E4M3
    if fmt not in FORMATS:
        raise ValueError(f"fmt: unknown FP8 format {fmt!r}; allowed: {', '.join(RECIPE_FORMATS)}")
    return get_format(fmt)


def check_float(x: torch.Tensor, name: str = "x") -> None:
    """ValueError naming `name` unless `x` is a floating-point tensor (fp8 inputs are refused too)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point() or x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        raise ValueError(f"{name}: expected a float16/bfloat16/float32/float64 tensor, got {x.dtype}")


def saturating_cast(x: torch.Tensor, fmt: str | FP8Format = "e4m3") -> torch.Tensor:
    """Cast `x` to the FP8 dtype of `fmt`: clamp to ±max, then round to nearest even. NaN stays NaN."""
    f = get_format(fmt)
    return x.clamp(-f.max, f.max).to(f.dtype)


_CHUNK = 1 << 18  # elements per pass of round_to_grid_: the int32 workspace stays in cache


def _dense_flat(y: torch.Tensor) -> torch.Tensor | None:
    """A 1-D view of every element of `y` in memory order, if `y` is dense (no gaps, no overlap)."""
    if y.is_contiguous():
        return y.view(-1)
    order = sorted(range(y.dim()), key=lambda d: y.stride(d), reverse=True)
    p = y.permute(order)
    return p.view(-1) if p.is_contiguous() else None


def round_to_grid_(y: torch.Tensor, fmt: str | FP8Format = "e4m3") -> torch.Tensor:
    """Round the fp32 tensor `y` to the FP8 grid of `fmt` **in place** (saturating, RNE) without an FP8
    dtype round trip: torch's CPU fp8→fp32 conversion is scalar (~3.5 ns/element), fp32 arithmetic is
    vectorised. Per element with exponent E (floored at the format's min normal exponent, so subnormals
    get their fixed spacing), `c = ±2^(E + 23 - mantissa_bits)` makes fp32's own RNE addition round `y`
    to the format's ulp: `y = (y + c) - c`. Values equal `saturating_cast(y).float()` exactly (tested on
    every tie and edge value), except that a negative value rounding to zero gives +0 instead of -0."""
    f = get_format(fmt)
    if y.dtype != torch.float32:
        raise ValueError(f"y: round_to_grid_ needs a float32 tensor, got {y.dtype}")
    y.clamp_(-f.max, f.max)
    floor_bits = (127 + round(math.log2(f.min_normal))) << 23
    shift = (23 - f.mantissa_bits) << 23
    flat = _dense_flat(y)
    if flat is None:  # not dense: one pass over the whole (strided) tensor
        chunks, work = [y], torch.empty(y.shape, dtype=torch.int32, device=y.device)
    else:
        chunks = [flat[i : i + _CHUNK] for i in range(0, flat.numel(), _CHUNK)]
        work = torch.empty(min(flat.numel(), _CHUNK), dtype=torch.int32, device=y.device)
    for chunk in chunks:
        e = work if flat is None else work[: chunk.numel()]
        torch.bitwise_and(chunk.view(torch.int32), 0x7F800000, out=e)
        e.clamp_(min=floor_bits).add_(shift)
        c = e.view(torch.float32).copysign_(chunk)
        chunk.add_(c).sub_(c)
    return y


def round_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """`x` rounded to bfloat16 (RNE) and returned in x's dtype: the bf16-emulation primitive (docs/architecture.md#emulation-on-cpu)."""
    if x.dtype == torch.bfloat16:
        return x
    return x.to(torch.bfloat16).to(x.dtype)
