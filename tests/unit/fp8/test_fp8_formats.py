"""The saturating RNE cast is bit-identical to torch's float8 dtypes and to ml_dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from fp8rl.fp8.formats import (
    E4M3,
    E5M2,
    get_format,
    resolve_format,
    round_to_bf16,
    round_to_grid_,
    saturating_cast,
)

ML = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def _bits(q: torch.Tensor) -> np.ndarray:
    return q.view(torch.uint8).numpy()


def _ml_bits(x: torch.Tensor, fmt: str) -> np.ndarray:
    f = get_format(fmt)
    clamped = np.clip(x.numpy(), -f.max, f.max)  # ml_dtypes overflows to NaN/inf: saturate first
    return clamped.astype(ML[fmt]).view(np.uint8)


def _wide_random(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mant = torch.rand(n, generator=g) + 0.5
    exp = torch.randint(-30, 30, (n,), generator=g).float()
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    return sign * mant * torch.exp2(exp)


def _ties(fmt: str) -> torch.Tensor:
    """Every midpoint between adjacent finite FP8 values, and those points ± 1 fp32 ulp."""
    f = get_format(fmt)
    codes = torch.arange(256, dtype=torch.uint8).view(f.dtype).float()
    vals = torch.unique(codes[torch.isfinite(codes)])
    mids = (vals[1:] + vals[:-1]) / 2
    return torch.cat([mids, torch.nextafter(mids, mids + 1), torch.nextafter(mids, mids - 1), vals])


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_random_and_ties_match_torch_and_ml_dtypes(fmt):
    x = torch.cat([_wide_random(20000, 0), _ties(fmt), -_ties(fmt)])
    ours = _bits(saturating_cast(x, fmt))
    np.testing.assert_array_equal(ours, _ml_bits(x, fmt))
    f = get_format(fmt)
    np.testing.assert_array_equal(ours, _bits(x.clamp(-f.max, f.max).to(f.dtype)))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_edge_values(fmt):
    f = get_format(fmt)
    sub = [f.min_subnormal, f.min_subnormal / 2, f.min_subnormal * 0.51, f.min_subnormal * 1.5, f.min_normal]
    x = torch.tensor([0.0, -0.0, f.max, -f.max, f.max * 1.06, -f.max * 1e3, 1e30, float("inf"), float("-inf"),
                      float("nan"), *sub, *[-s for s in sub]])  # fmt: skip
    y = saturating_cast(x, fmt).float()
    assert y[2] == f.max and y[3] == -f.max
    assert y[4] == f.max and y[5] == -f.max and y[6] == f.max  # overflow saturates
    assert y[7] == f.max and y[8] == -f.max  # ±inf saturate
    assert torch.isnan(y[9])
    assert torch.signbit(y[1]) and not torch.signbit(y[0])
    assert y[10] == f.min_subnormal and y[11] == 0.0 and y[12] == f.min_subnormal  # tie to even: 0
    assert y[13] == 2 * f.min_subnormal  # 1.5 ulp ties to the even code 2
    ok = ~torch.isnan(x).numpy()  # NaN payloads differ between libraries (e5m2 has several NaN codes)
    np.testing.assert_array_equal(_bits(saturating_cast(x, fmt))[ok], _ml_bits(x, fmt)[ok])
    assert np.isnan(_ml_bits(x, fmt).view(ML[fmt]).astype(np.float32)[~ok]).all()


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_every_finite_code_round_trips(fmt):
    f = get_format(fmt)
    vals = torch.arange(256, dtype=torch.uint8).view(f.dtype).float()
    finite = vals[torch.isfinite(vals)]
    assert torch.equal(saturating_cast(finite, fmt).float(), finite)
    assert finite.abs().max().item() == f.max == torch.finfo(f.dtype).max


def test_formats_and_bf16():
    assert resolve_format("hybrid", "forward") is E4M3 and resolve_format("hybrid", "grad") is E5M2
    assert resolve_format("e5m2", "forward") is E5M2
    with pytest.raises(ValueError, match="fmt"):
        get_format("e3m4")
    with pytest.raises(ValueError, match="fmt"):
        resolve_format("fp4", "grad")
    x = _wide_random(1000, 3)
    assert torch.equal(round_to_bf16(x), x.to(torch.bfloat16).float())


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_arithmetic_grid_rounding_equals_the_cast(fmt):
    f = get_format(fmt)
    edges = torch.tensor([0.0, -0.0, f.max * 1.05, -1e30, float("inf"), float("-inf"), float("nan"), 1e-45,
                          -1e-45, f.min_subnormal / 2, -f.min_subnormal * 1.5, f.min_normal])  # fmt: skip
    x = torch.cat([_wide_random(300_000, 1), _ties(fmt), -_ties(fmt), edges])  # > one 2^18 chunk
    ref = saturating_cast(x, fmt).float()
    got = round_to_grid_(x.clone(), fmt)
    same = (got == ref) | (torch.isnan(got) & torch.isnan(ref))
    assert same.all(), x[~same][:5]
    strided = x[: 2 * 1000].reshape(1000, 2).t()  # dense but transposed, and a gappy view
    assert torch.equal(
        round_to_grid_(strided.clone().t().contiguous().t(), fmt), saturating_cast(strided, fmt).float()
    )
    gappy = x[:4000].reshape(1000, 4)[:, ::2]
    torch.testing.assert_close(
        round_to_grid_(gappy.clone(), fmt), saturating_cast(gappy, fmt).float(), equal_nan=True
    )
    with pytest.raises(ValueError, match="y"):
        round_to_grid_(torch.zeros(3, dtype=torch.float64), fmt)


def test_the_formats_are_registered_where_defined_under_the_vocabulary_names():
    from fp8rl.fp8.formats import REGISTRY, FP8Format, register_format
    from fp8rl.vocabulary import FP8_FORMATS

    assert tuple(REGISTRY) == FP8_FORMATS
    with pytest.raises(ValueError, match="registered twice"):
        register_format(REGISTRY["e4m3"])
    with pytest.raises(ValueError, match="not in fp8rl.vocabulary.FP8_FORMATS"):
        register_format(FP8Format("e3m4", torch.float8_e4m3fn, 15.5, 0.25, 2.0**-6, 4))
