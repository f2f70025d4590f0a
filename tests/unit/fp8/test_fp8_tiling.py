"""Tiling: a granularity name resolved once (enum, block, pow2), its errors, and its use by OperandSpec."""

from __future__ import annotations

import pytest
import torch

from fp8rl.fp8 import (
    E4M3,
    E5M2,
    TILE_GRANULARITIES,
    Granularity,
    OperandSpec,
    Tiling,
    fake_quantize,
    quantize,
)
from fp8rl.fp8.quantize import compute_scale, fake_quantize_tiled, quantize_tiled, tensor_to_amax


def test_names_resolve_to_the_enum_and_mx_fixes_its_block():
    assert [Tiling(g).granularity for g in TILE_GRANULARITIES] == list(Granularity)
    assert Tiling("rowwise") == Tiling(Granularity.ROWWISE)
    assert Tiling("block1d", 64, pow2_scales=True) == Tiling(Granularity.BLOCK1D, 64, True)
    assert Tiling("mx", block=128).block == 32  # OCP MX: 32 elements per scale, whatever was asked
    assert [Tiling(g).tiled for g in TILE_GRANULARITIES] == [False, False, True, True, True]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (
            ("blockwise",),
            "granularity: unknown 'blockwise'; allowed: tensorwise, rowwise, block1d, block2d, mx",
        ),
        ((None,), "granularity: unknown None"),
        (("block1d", 0), "block: must be a positive int, got 0"),
        (("block2d", 1.5), "block: must be a positive int, got 1.5"),
    ],
)
def test_bad_tiling_arguments_name_the_argument(args, match):
    with pytest.raises(ValueError, match=match):
        Tiling(*args)


def test_check_refuses_shapes_the_layout_cannot_cut():
    with pytest.raises(
        ValueError, match=r"w: granularity 'block2d' needs a 2-D tensor, got shape \(2, 3, 4\)"
    ):
        Tiling("block2d").check(torch.zeros(2, 3, 4), "w")
    with pytest.raises(ValueError, match="x: granularity 'rowwise' needs at least 1 dim"):
        Tiling("rowwise").check(torch.tensor(1.0))
    with pytest.raises(ValueError, match="x: expected a float"):
        Tiling("tensorwise").check(torch.zeros(3, dtype=torch.int32))
    Tiling("tensorwise").check(torch.tensor(1.0))  # a scalar has one tensorwise scale


@pytest.mark.parametrize("granularity", ["block1d", "block2d", "mx"])
def test_tiles_pad_and_untile_crops_back(granularity):
    x = torch.randn(37, 70)
    t = Tiling(granularity, 16)
    tiles = t.tiles(x)
    assert tiles.shape[-1] == t.block
    assert torch.equal(t.untile(tiles, x.shape), x)
    amax = tensor_to_amax(x, t)
    assert amax.shape == ((3, 5) if granularity == "block2d" else (37, -(-70 // t.block)))
    assert torch.equal(
        amax[0, 0], x[:16, :16].abs().max() if granularity == "block2d" else x[0, : t.block].abs().max()
    )


@pytest.mark.parametrize("granularity", TILE_GRANULARITIES)
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_the_string_api_is_the_tiled_api(granularity, fmt):
    x = torch.randn(33, 96, generator=torch.Generator().manual_seed(3))
    t = Tiling(granularity, 32, pow2_scales=True)
    q, s = quantize(x, fmt, granularity, block=32, pow2_scales=True)
    qt, st = quantize_tiled(x, fmt, t)
    assert torch.equal(q.view(torch.uint8), qt.view(torch.uint8)) and torch.equal(s, st)
    assert torch.equal(compute_scale(x, fmt, granularity, block=32, pow2_scales=True), s)
    assert torch.equal(
        fake_quantize(x, fmt, granularity, block=32, pow2_scales=True), fake_quantize_tiled(x, fmt, t)
    )


def test_operand_spec_resolves_its_names_once():
    spec = OperandSpec("e5m2", "block2d", block=64, pow2_scales=True)
    assert spec.tiling == Tiling(Granularity.BLOCK2D, 64, True) and spec.format is E5M2
    assert OperandSpec("e4m3", "mx").format is E4M3 and OperandSpec("e4m3", "mx").tiling.block == 32
    assert spec == OperandSpec("e5m2", "block2d", block=64, pow2_scales=True)  # derived fields not compared
    assert "tiling" not in repr(spec)
    with pytest.raises(ValueError, match="granularity: unknown 'per_channel'"):
        OperandSpec("e4m3", "per_channel")
    with pytest.raises(ValueError, match="fmt: unknown FP8 format 'hybrid'"):
        OperandSpec("hybrid", "tensorwise")  # a recipe-level name, not an operand's format
