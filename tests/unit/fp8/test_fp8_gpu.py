"""On an FP8 GPU: the casts and scales are the CPU's bit for bit, and FP8Linear's real FP8 GEMMs
(`torch._scaled_mm`, cuBLASLt) agree with its emulation within accumulation-order error, in the forward
and both backward GEMMs. Skipped without a CUDA device of compute capability ≥ 8.9."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fp8rl.fp8 import TILE_GRANULARITIES, FP8Linear, fake_quantize, get_recipe, quantize

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _fp8_gpu():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("needs a CUDA GPU with FP8 tensor cores (compute capability >= 8.9)")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("granularity", TILE_GRANULARITIES)
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_cuda_quantize_is_the_cpus_bit_for_bit(granularity, fmt):
    torch.manual_seed(0)
    x = torch.randn(256, 384) * torch.logspace(-3, 3, 384)  # a wide dynamic range, outlier columns
    x[1] = 0.0  # an all-zero row: all-zero rows and blocks
    x[2, :32] = torch.randn(32) * 1e-6  # tiny values beside large ones: subnormals, flushes to zero
    q_cpu, s_cpu = quantize(x, fmt, granularity)
    q_gpu, s_gpu = quantize(x.cuda(), fmt, granularity)
    assert torch.equal(q_gpu.cpu().view(torch.uint8), q_cpu.view(torch.uint8))
    torch.testing.assert_close(s_gpu.cpu(), s_cpu, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(
        fake_quantize(x.cuda(), fmt, granularity).cpu(), fake_quantize(x, fmt, granularity), rtol=0, atol=0,
        equal_nan=True,
    )  # fmt: skip


def _fwd_bwd(layer: nn.Module, x: torch.Tensor, dy: torch.Tensor):
    x = x.clone().requires_grad_(True)
    layer.weight.grad = None
    y = layer(x)
    y.backward(dy)
    return y.detach(), x.grad, layer.weight.grad.clone()


@pytest.mark.parametrize("tokens", [128, 100])  # 100: cuBLASLt's multiples of 16 reached by zero padding
@pytest.mark.parametrize("name", ["tensorwise", "delayed", "rowwise"])
def test_scaled_mm_on_the_gpu_matches_the_emulation(name, tokens):
    torch.manual_seed(1)
    lin = nn.Linear(512, 256 if tokens % 16 == 0 else 264, bias=False, device="cuda")  # 264: padded too
    x, dy = torch.randn(tokens, 512, device="cuda"), torch.randn(tokens, lin.out_features, device="cuda")
    x[:, :4] *= 30.0  # outlier channels, as LLM activations
    ref = _fwd_bwd(lin, x, dy)
    emu_layer = FP8Linear.from_linear(lin, get_recipe(name), backend="emulated")
    real_layer = FP8Linear.from_linear(lin, get_recipe(name))  # the default on FP8 hardware
    assert real_layer.backend == "scaled_mm"
    for layer in (emu_layer, real_layer):  # delayed: seed the history with this input first
        _fwd_bwd(layer, x, dy)
    emu = _fwd_bwd(emu_layer, x, dy)
    real_layer.runtime.gemms.reset()
    real = _fwd_bwd(real_layer, x, dy)
    # output, grad-input, grad-weight
    assert real_layer.runtime.gemms.counts() == {"emulated": 0, "scaled_mm": 3}
    for what, e, r, f in zip(("y", "dx", "dw"), emu, real, ref, strict=True):
        fp8_err = _rel(e, f)
        assert fp8_err > 1e-3, (what, "quantization had no effect")
        assert _rel(r, e) <= 0.5 * fp8_err, (name, what, _rel(r, e), fp8_err)
