"""quantize / dequantize / fake_quantize: scales as torchao, MX as the OCP spec, error per granularity."""

from __future__ import annotations

import pytest
import torch

from fp8rl.fp8 import TILE_GRANULARITIES, dequantize, fake_quantize, quantize
from fp8rl.fp8.formats import get_format
from fp8rl.fp8.quantize import compute_scale, fake_quantize_tiled
from fp8rl.fp8.tiling import Tiling

torchao_float8 = pytest.importorskip("torchao.float8.float8_utils")


def _gauss(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _outliers(seed: int = 1) -> torch.Tensor:
    """Gaussian rows with a few huge channels/rows, as LLM activations."""
    x = _gauss(256, 512, seed=seed) * torch.logspace(-2, 1, 256)[:, None]
    x[:, 7] *= 400.0
    x[3] *= 1e3
    return x


def _rel_err(x: torch.Tensor, y: torch.Tensor) -> float:
    return ((x - y).norm() / x.norm()).item()


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("pow2", [False, True])
def test_scales_match_torchao(fmt, pow2):
    from torchao.float8.config import ScalingGranularity

    dtype = get_format(fmt).dtype
    x = _outliers()
    ref_tw = torchao_float8.tensor_to_scale(x, dtype, round_scales_to_power_of_2=pow2)
    ref_rw = torchao_float8.tensor_to_scale(
        x,
        dtype,
        scaling_granularity=ScalingGranularity.AXISWISE,
        axiswise_dim=-1,
        round_scales_to_power_of_2=pow2,
    )
    _, s_tw = quantize(x, fmt, "tensorwise", pow2_scales=pow2)
    q_rw, s_rw = quantize(x, fmt, "rowwise", pow2_scales=pow2)
    assert torch.equal(s_tw, ref_tw) and torch.equal(s_rw, ref_rw)
    ref_q = torchao_float8.to_fp8_saturated(x * ref_rw, dtype)
    assert torch.equal(q_rw.view(torch.uint8), ref_q.view(torch.uint8))


def test_mx_shared_exponent_rule():
    x = _outliers()
    x[5, 32:64] = 0.0  # an all-zero block
    q, s = quantize(x, "e4m3", "mx")
    assert s.shape == (256, 512 // 32) and q.shape == x.shape
    e = torch.log2(s)
    assert torch.equal(e, e.round()), "MX scales are powers of two"
    amax = x.reshape(256, 16, 32).abs().amax(-1)
    nz = amax > 0
    # X = 2^(floor(log2 amax) - 8)  <=>  amax * scale in [2^8, 2^9)
    assert torch.equal(torch.floor(torch.log2(amax[nz] * s[nz])), torch.full_like(amax[nz], 8.0))
    assert torch.isfinite(s).all() and (q.float()[5, 32:64] == 0).all()
    assert (e >= -127).all() and (e <= 127).all()


def test_mx_matches_torchao_mx():
    mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    x = _outliers()
    scale_e8m0, data = mx.to_mx(x, torch.float8_e4m3fn, 32)
    q, s = quantize(x, "e4m3", "mx")
    assert torch.equal(q.view(torch.uint8), data.view(torch.uint8))
    assert torch.equal(1.0 / s, scale_e8m0.float().reshape(s.shape))


@pytest.mark.parametrize("granularity", TILE_GRANULARITIES)
def test_dequantize_of_quantize_is_fake_quantize(granularity):
    x = _gauss(130, 300, seed=4)  # the blocks do not divide either dim: padding
    q, s = quantize(x, "e4m3", granularity)
    assert q.shape == x.shape and q.dtype == torch.float8_e4m3fn
    assert torch.equal(dequantize(q, s, granularity), fake_quantize(x, "e4m3", granularity))
    assert fake_quantize(x.bfloat16(), "e4m3", granularity).dtype == torch.bfloat16


def test_padding_equals_explicit_zero_padding():
    x = _gauss(5, 130, seed=5)
    padded = torch.nn.functional.pad(x, (0, 126))
    q, s = quantize(x, "e4m3", "block1d")
    qp, sp = quantize(padded, "e4m3", "block1d")
    assert torch.equal(s, sp) and torch.equal(q.view(torch.uint8), qp[:, :130].view(torch.uint8))
    w = _gauss(130, 200, seed=6)
    _, s2 = quantize(w, "e4m3", "block2d")
    assert s2.shape == (2, 2)
    assert torch.equal(s2[1, 1], compute_scale(w[128:, 128:], "e4m3", "tensorwise"))


@pytest.mark.parametrize("granularity", TILE_GRANULARITIES)
def test_all_zero_and_nan(granularity):
    z = torch.zeros(64, 256)
    q, s = quantize(z, "e4m3", granularity)
    assert torch.isfinite(s).all() and (q.float() == 0).all()
    assert torch.equal(fake_quantize(z, "e4m3", granularity), z)
    x = _gauss(64, 256)
    x[0, 0] = float("nan")
    assert torch.isnan(fake_quantize(x, "e4m3", granularity)[0, 0])


def test_relative_error_bounds():
    g = _gauss(256, 512, seed=7)
    o = _outliers()
    err = {k: _rel_err(o, fake_quantize(o, "e4m3", k)) for k in TILE_GRANULARITIES}
    for k in TILE_GRANULARITIES:
        assert _rel_err(g, fake_quantize(g, "e4m3", k)) < 0.035  # 3 mantissa bits: ~2^-4 / sqrt(3)
        assert _rel_err(g, fake_quantize(g, "e5m2", k)) < 0.07
    for k in ("rowwise", "block1d", "block2d"):
        assert err[k] < err["tensorwise"], err
    # MX's floor rule puts a block's amax in [256, 512): above 448 it saturates (the OCP v1.0 behaviour
    # torchao documents for ScaleCalculationMode.FLOOR), so the outliers themselves lose up to 12.5%...
    assert err["mx"] > err["rowwise"]
    # ...while the small-magnitude rows, which one tensor-wide scale pushes into the subnormals, are kept
    # by every finer granularity
    rows = o[:10]
    tw = _rel_err(rows, fake_quantize(o, "e4m3", "tensorwise")[:10])
    for k in ("rowwise", "block1d", "mx"):
        assert _rel_err(rows, fake_quantize(o, "e4m3", k)[:10]) < 0.5 * tw, k


def test_pow2_scales_round_down():
    x = _gauss(64, 256)
    s = compute_scale(x, "e4m3", "rowwise")
    s2 = compute_scale(x, "e4m3", "rowwise", pow2_scales=True)
    assert (s2 <= s).all() and (s2 > s / 2).all() and torch.equal(torch.log2(s2), torch.log2(s2).round())


def test_bad_arguments_name_the_argument():
    x = _gauss(4, 8)
    with pytest.raises(ValueError, match="fmt"):
        quantize(x, "e3m4")
    with pytest.raises(ValueError, match="granularity"):
        quantize(x, "e4m3", "channelwise")
    with pytest.raises(ValueError, match="x: granularity 'block2d'"):
        quantize(_gauss(2, 4, 8), "e4m3", "block2d")
    with pytest.raises(ValueError, match="x: expected"):
        fake_quantize(torch.arange(8), "e4m3")
    with pytest.raises(ValueError, match="block"):
        quantize(x, "e4m3", "block1d", block=0)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_quantize_cast_saturates_like_saturating_cast(fmt):
    from fp8rl.fp8.formats import saturating_cast

    m = get_format(fmt).max
    x = torch.tensor([m * 1.03, m * 1.2, -1e30, float("inf"), float("-inf"), float("nan"), 0.1, -3.0])
    q, _ = quantize(x, fmt, scale=torch.tensor(1.0))
    assert torch.equal(q.view(torch.uint8), saturating_cast(x, fmt).view(torch.uint8))


def test_compiled_fake_quant_is_identical():
    x = _outliers()
    x[0, :3] = torch.tensor([float("nan"), float("inf"), -0.0])
    eager = {k: fake_quantize(x, "e4m3", k, scale=torch.tensor(2.0)) for k in ("tensorwise", "block1d")}
    for k, ref in eager.items():
        got = fake_quantize_tiled(x, "e4m3", Tiling(k), scale=torch.tensor(2.0), compiled=True)
        assert torch.equal(got[1:], ref[1:]) and torch.equal(got[0, 1:], ref[0, 1:]), k
        assert torch.isnan(got[0, 0])
