"""The `fast` numerics mode's real bf16 GEMMs (fp8rl.fp8.fastgemm): the pinned path untouched in
`reproducible` mode, FP8 values exact in bf16, products within the stated bound of the fp32 emulation.

The kernels are called directly (they run in any mode, on the pinned oneDNN too, slowly); the layers'
fast path is switched on by patching the process's dispatch rule, as `fast` mode would."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from fp8rl import numerics
from fp8rl.fp8 import RECIPES, BF16Linear, FP8Linear, fastgemm, get_recipe, make_rollout_policy
from fp8rl.fp8.formats import E4M3, E5M2
from fp8rl.fp8.linear import _BF16LinearFn, _FP8LinearFn, fp8_gemm
from fp8rl.fp8.quantize import fake_quantize_tiled, quantize_tiled

BOUND = 2.0**-7  # |fast - emulated| <= BOUND * (|A| |B|ᵀ), elementwise (fp8rl.fp8.fastgemm)


def _magnitude(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.abs().float() @ b.abs().float().t()


# ------------------------------------------------------------------------------------ reproducible mode

reproducible_only = pytest.mark.skipif(
    numerics.active_mode() != "reproducible", reason="checks the pinned path of a reproducible-mode process"
)


@reproducible_only
def test_the_rule_never_takes_real_gemms_outside_fast_mode():
    flags = ("avx2", "avx512_bf16", "amx_bf16", "avx512_fp16")
    for dtype in (torch.bfloat16, torch.float16):
        r = fastgemm._rule(dtype, "reproducible", flags, {fastgemm.ENV: "real"})
        assert not r.enabled and not r.use_real(4096, 4096, 4096)
    assert numerics.active_mode() == "reproducible"  # the tests' own mode
    assert not fastgemm.enabled(torch.bfloat16)


def test_the_rule_in_fast_mode_looks_at_the_machine():
    r = fastgemm._rule(torch.bfloat16, "fast", ("avx2", "avx512_bf16"), {})
    assert r.enabled and r.use_real(128, 128, 384) and not r.use_real(8, 128, 128)
    assert fastgemm._rule(torch.bfloat16, "fast", ("avx2", "amx_bf16"), {}).min_macs > r.min_macs
    assert not fastgemm._rule(torch.bfloat16, "fast", ("avx2", "fma"), {}).enabled
    assert not fastgemm._rule(
        torch.bfloat16, "fast", ("avx512_bf16",), {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    ).enabled
    assert not fastgemm._rule(torch.bfloat16, "fast", ("avx512_bf16",), {fastgemm.ENV: "emulated"}).enabled
    assert fastgemm._rule(torch.bfloat16, "fast", (), {fastgemm.ENV: "real"}).use_real(1, 1, 1)
    with pytest.raises(ValueError, match=fastgemm.ENV):
        fastgemm._rule(torch.bfloat16, "fast", (), {fastgemm.ENV: "yes"})


def _grads(layer: nn.Module, x: torch.Tensor, dy: torch.Tensor, fn=None):
    x = x.clone().requires_grad_(True)
    layer.weight.grad = layer.bias.grad = None
    y = fn(x) if fn is not None else layer(x)
    y.backward(dy)
    return [t.clone() for t in (y.detach(), x.grad, layer.weight.grad, layer.bias.grad)]


@reproducible_only
@pytest.mark.parametrize("name", [None, *RECIPES])
def test_reproducible_mode_runs_todays_path_bit_for_bit(name):
    """In `reproducible` mode the layers take the emulated autograd functions, unchanged, and give
    exactly their outputs and gradients; the rollout copy takes no real GEMM."""
    torch.manual_seed(0)
    base = nn.Linear(96, 80)
    x, dy = torch.randn(3, 7, 96), torch.randn(3, 7, 80)
    if name is None:
        layer = BF16Linear.from_linear(copy.deepcopy(base))
        assert not layer.real_bf16

        def today(t):
            return _BF16LinearFn.apply(t, layer.weight, layer.bias)
    else:
        layer = FP8Linear.from_linear(copy.deepcopy(base), get_recipe(name))
        assert not layer.real_bf16 and not layer.real_bf16_fp8

        def today(t):
            return _FP8LinearFn.apply(t, layer.weight, layer.bias, layer)

    got, want = _grads(layer, x, dy), _grads(layer, x, dy, today)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    rollout = make_rollout_policy(nn.Sequential(base), None if name is None else get_recipe(name), skip=())
    assert all(not m.real and m.weight_op is None for m in rollout.modules() if hasattr(m, "real"))


# ------------------------------------------------------------------------------ FP8 values and products


@pytest.mark.parametrize("fmt", [E4M3, E5M2])
def test_every_fp8_value_survives_the_trip_to_bf16_bit_for_bit(fmt):
    codes = torch.arange(256, dtype=torch.uint8).view(fmt.dtype)
    values = codes.float()
    finite = values.isfinite()
    there_and_back = codes.to(torch.bfloat16).float()
    assert torch.equal(there_and_back[finite].view(torch.int32), values[finite].view(torch.int32))
    assert torch.equal(values[finite].to(torch.bfloat16).float(), values[finite])


@pytest.mark.parametrize("name", RECIPES)
def test_prepared_operands_are_the_fp8_values(name):
    """`prepare` gives the quantized FP8 values exactly (and their scale), or for power-of-two scales the
    fake-quantized operand exactly: nothing is lost on the way into the bf16 GEMM."""
    torch.manual_seed(1)
    for spec in get_recipe(name).gemms():
        for op_spec, x in ((spec.a, torch.randn(200, 300) * 5), (spec.b, torch.randn(150, 300))):
            op = fastgemm.prepare(x, op_spec)
            assert op.values.dtype == torch.bfloat16
            if op.scale is None:
                want = fake_quantize_tiled(x, op_spec.format, op_spec.tiling)
            else:
                q, scale = quantize_tiled(x, op_spec.format, op_spec.tiling)
                want = q.float()
                assert torch.equal(op.scale, scale)
            assert torch.equal(op.values.float(), want)


@pytest.mark.parametrize("name", RECIPES)
def test_fp8_products_within_the_bound_of_the_fp32_emulation(name):
    torch.manual_seed(2)
    for spec in get_recipe(name).gemms():
        a = torch.randn(260, 300) * torch.logspace(-2, 2, 300)  # K not a multiple of 128, scales vary
        b = torch.randn(140, 300)
        emulated = fp8_gemm(a, b, spec)
        fast = fastgemm.fp8_mm(fastgemm.prepare(a, spec.a), fastgemm.prepare(b, spec.b))
        assert fast.dtype == torch.float32 and fast.shape == emulated.shape
        assert ((fast - emulated).abs() <= BOUND * _magnitude(a, b)).all()
        assert not torch.equal(fast, torch.zeros_like(fast))


def test_blockwise_sums_one_scaled_partial_per_k_block():
    """A K block whose scale differs by 2^20 from its neighbour's keeps its own precision: the partials
    are scaled separately, not summed before their scales are applied."""
    spec = get_recipe("blockwise").output
    a = torch.randn(64, 256)
    a[:, 128:] *= 2.0**-20
    b = torch.randn(32, 256)
    fast = fastgemm.fp8_mm(fastgemm.prepare(a, spec.a), fastgemm.prepare(b, spec.b))
    small = fastgemm.fp8_mm(fastgemm.prepare(a[:, 128:], spec.a), fastgemm.prepare(b[:, 128:], spec.b))
    big = fastgemm.fp8_mm(fastgemm.prepare(a[:, :128], spec.a), fastgemm.prepare(b[:, :128], spec.b))
    torch.testing.assert_close(fast, big + small, rtol=2.0**-22, atol=0)


def test_real_bf16_gemm_within_the_bound():
    torch.manual_seed(3)
    a, b = torch.randn(200, 300).bfloat16(), torch.randn(300, 120).bfloat16()
    real = fastgemm.mm(a, b, torch.bfloat16, fastgemm.Rule(torch.bfloat16, True, 0, "test"))
    emulated = fastgemm.mm(a, b, torch.bfloat16, fastgemm.Rule(torch.bfloat16, False, 0, "test"))
    assert real.dtype == emulated.dtype == torch.bfloat16
    diff = (real.float() - emulated.float()).abs()
    assert (diff <= BOUND * (a.float().abs() @ b.float().abs())).all()


# ----------------------------------------------------------------------------------- the fast layers


@pytest.fixture
def fast_mode(monkeypatch):
    """This process's dispatch as in `fast` mode on a machine with real bf16 GEMMs at every size."""
    real = fastgemm.Rule(torch.bfloat16, True, 0, "test")
    monkeypatch.setattr(fastgemm, "rule", lambda dtype=torch.bfloat16: real)
    monkeypatch.setattr(fastgemm, "enabled", lambda dtype=torch.bfloat16: True)


@pytest.mark.parametrize("name", [None, *RECIPES])
def test_fast_layers_within_the_bound_of_the_emulated_ones(fast_mode, name):
    torch.manual_seed(4)
    base = nn.Linear(160, 96)
    x, dy = torch.randn(5, 40, 160), torch.randn(5, 40, 96)
    if name is None:
        layer = BF16Linear.from_linear(copy.deepcopy(base))
        assert layer.real_bf16

        def emulated(t):
            return _BF16LinearFn.apply(t, layer.weight, layer.bias)
    else:
        layer = FP8Linear.from_linear(copy.deepcopy(base), get_recipe(name))
        assert layer.real_bf16_fp8

        def emulated(t):
            return _FP8LinearFn.apply(t, layer.weight, layer.bias, layer)

    y, dx, dw, db = _grads(layer, x, dy)
    ye, dxe, dwe, dbe = _grads(layer, x, dy, emulated)
    w = base.weight.detach()
    x2, dy2 = x.reshape(-1, 160), dy.reshape(-1, 96)
    # the bias enters after the GEMM: its own bf16 rounding on top of the product's
    assert ((y - ye).abs().reshape(-1, 96) <= BOUND * (_magnitude(x2, w) + base.bias.abs())).all()
    assert ((dx - dxe).abs().reshape(-1, 160) <= BOUND * _magnitude(dy2, w.t())).all()
    assert ((dw - dwe).abs() <= BOUND * _magnitude(dy2.t(), x2.t())).all()
    assert torch.equal(db, dbe)
    if name is not None:
        assert layer.runtime.gemms.counts()["bf16"] == 3


def test_a_noise_dose_keeps_the_emulated_fp8_path(fast_mode):
    from fp8rl.fp8 import FP8Runtime

    layer = FP8Linear.from_linear(
        nn.Linear(32, 32), get_recipe("tensorwise"), runtime=FP8Runtime(noise_scale=2.0)
    )
    assert not layer.real_bf16_fp8


@pytest.mark.parametrize("name", [None, "tensorwise", "blockwise", "mxfp8"])
def test_fast_rollout_copy_within_the_bound(fast_mode, name):
    torch.manual_seed(5)
    policy = nn.Sequential(nn.Linear(160, 96))
    recipe = None if name is None else get_recipe(name)
    rollout = make_rollout_policy(policy, recipe, skip=())
    layer = rollout[0]
    assert layer.real and layer.weight_op is not None
    x = torch.randn(4, 9, 160)
    with torch.no_grad():
        fast = rollout(x)
        layer.weight_op = None  # the emulated path
        emulated = rollout(x)
    w = policy[0].weight.detach()
    bound = BOUND * (_magnitude(x.reshape(-1, 160), w) + policy[0].bias.detach().abs())
    assert ((fast - emulated).abs().reshape(-1, 96) <= bound).all()
