"""FP8Linear: gradients within format error of fp32, exact switch-off, conversion leaves skips alone."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from fp8rl.fp8 import (
    RECIPES,
    BF16Linear,
    FP8Linear,
    convert_to_bf16_emulation,
    convert_to_fp8,
    fp8_state_dict,
    get_recipe,
    load_fp8_state_dict,
    quantization_disabled,
)
from fp8rl.fp8.linear import fp8_gemm, quantize_operand


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def _run(layer: nn.Module, x: torch.Tensor, dy: torch.Tensor):
    x = x.clone().requires_grad_(True)
    for p in layer.parameters():
        p.grad = None
    y = layer(x)
    y.backward(dy)
    return y.detach(), x.grad, layer.weight.grad.clone(), layer.bias.grad.clone()


@pytest.mark.parametrize("name", RECIPES)
def test_fp8_linear_close_to_fp32_within_format_error(name):
    torch.manual_seed(0)
    lin = nn.Linear(256, 192)
    x, dy = torch.randn(3, 40, 256), torch.randn(3, 40, 192)
    ref = _run(lin, x, dy)
    fp8 = FP8Linear.from_linear(lin, get_recipe(name))
    got = _run(fp8, x, dy)
    # two e4m3 operands (rel. error ~2.5% each) -> ~3.6%; e5m2 gradients (hybrid) ~5%; MX's floor rule
    # saturates block maxima -> ~6-7%
    bound = 0.1 if name == "mxfp8" else 0.075
    torch.testing.assert_close(got[3], ref[3])  # db = sum(dy): no GEMM, nothing quantized
    for g, r, what in zip(got[:3], ref[:3], ("y", "dx", "dw"), strict=True):
        assert _rel(g, r) < bound, (name, what, _rel(g, r))
        assert _rel(g, r) > 1e-4, (name, what, "quantization had no effect")
    assert fp8.weight is lin.weight


def test_hybrid_uses_e5m2_for_gradients_only():
    r = get_recipe("tensorwise")
    assert (r.output.a.fmt, r.output.b.fmt) == ("e4m3", "e4m3")
    assert r.grad_input.a.fmt == "e5m2" and r.grad_weight.a.fmt == "e5m2"
    assert get_recipe("tensorwise", "e4m3").grad_input.a.fmt == "e4m3"
    b = get_recipe("blockwise")
    assert (b.output.a.granularity, b.output.b.granularity, b.grad_weight.b.granularity) == (
        "block1d",
        "block2d",
        "block1d",
    )
    assert get_recipe("mxfp8").output.a.block == 32 and get_recipe("rowwise").output.a.pow2_scales
    with pytest.raises(ValueError, match="granularity"):
        get_recipe("columnwise")
    with pytest.raises(ValueError, match="fmt"):
        get_recipe("tensorwise", "int8")
    with pytest.raises(ValueError, match="amax_compute_algo"):
        get_recipe("delayed", amax_compute_algo="mean")


@pytest.mark.parametrize("name", ["tensorwise", "rowwise"])
def test_scaled_mm_backend_matches_emulation(name):
    torch.manual_seed(1)
    lin = nn.Linear(128, 64)
    x, dy = torch.randn(32, 128), torch.randn(32, 64)
    emu = _run(FP8Linear.from_linear(lin, get_recipe(name), backend="emulated"), x, dy)
    smm = _run(FP8Linear.from_linear(lin, get_recipe(name), backend="scaled_mm"), x, dy)
    for a, b in zip(emu, smm, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)  # fp32 accumulation order, bf16 rounding


@pytest.mark.parametrize("granularity", ["tensorwise", "rowwise"])
def test_zero_padding_to_cublas_dims_leaves_the_fp8_product_unchanged(granularity):
    """CUDA pads every dim to a multiple of 16; on the CPU kernel (no such rule) the padded product of
    odd-sized operands must be the unpadded one."""
    from fp8rl.fp8 import dequantize, quantize
    from fp8rl.fp8.linear import _scaled_mm_padded

    torch.manual_seed(3)
    a, b = torch.randn(37, 45), torch.randn(21, 45)
    (qa, sa), (qb, sb) = quantize(a, "e4m3", granularity), quantize(b, "e4m3", granularity)
    inv_a, inv_b = sa.reciprocal(), sb.reciprocal().reshape(1, -1) if sb.dim() else sb.reciprocal()
    plain = _scaled_mm_padded(qa, qb, inv_a, inv_b, torch.float32, multiple=1)
    padded = _scaled_mm_padded(qa, qb, inv_a, inv_b, torch.float32, multiple=16)
    assert padded.shape == (37, 21)
    torch.testing.assert_close(padded, plain, rtol=1e-5, atol=1e-5)  # fp32 summation order only
    reference = dequantize(qa, sa, granularity) @ dequantize(qb, sb, granularity).t()
    torch.testing.assert_close(plain, reference, rtol=1e-5, atol=1e-5)


def test_gemm_quantizes_along_the_contraction_dim():
    a, b = torch.randn(8, 256), torch.randn(16, 256)
    spec = get_recipe("blockwise").output
    expected = quantize_operand(a, spec.a) @ quantize_operand(b, spec.b).t()
    assert torch.equal(fp8_gemm(a, b, spec), expected)


def test_delayed_scaling_uses_the_history():
    torch.manual_seed(2)
    lin = nn.Linear(64, 32)
    layer = FP8Linear.from_linear(lin, get_recipe("delayed", amax_history_len=4))
    small, big = torch.randn(16, 64), 100 * torch.randn(16, 64)
    layer(small)
    hist = layer.amax_histories["input"]
    assert hist.count == 1 and hist.amax() == small.abs().max()
    y_big = layer(big)  # scaled by the small step's amax: the big input saturates at 448/scale
    y_cur = FP8Linear.from_linear(lin, get_recipe("tensorwise"))(big)
    ref = nn.functional.linear(big, lin.weight, lin.bias)
    assert _rel(y_big, ref) > 5 * _rel(y_cur, ref)
    assert hist.amax() == big.abs().max()
    for _ in range(4):
        layer(small)
    assert hist.amax() == small.abs().max()  # the big amax left the 4-long window
    saved = fp8_state_dict(layer_model := nn.Sequential(layer))
    fresh = convert_to_fp8(nn.Sequential(nn.Linear(64, 32)), get_recipe("delayed", amax_history_len=4))
    load_fp8_state_dict(fresh, saved)
    assert torch.equal(fresh[0].amax_histories["input"].history, hist.history)
    assert layer_model[0] is layer


def test_quantization_disabled_is_bit_identical(tiny_llama):
    ref = copy.deepcopy(tiny_llama)
    ids = torch.randint(0, 40, (2, 12))
    convert_to_fp8(tiny_llama, get_recipe("delayed"))
    quantized = tiny_llama(ids).logits
    with quantization_disabled(tiny_llama):
        plain = tiny_llama(ids).logits
        plain.sum().backward()
    ref_logits = ref(ids).logits
    ref_logits.sum().backward()
    assert torch.equal(plain, ref_logits)
    assert not torch.equal(quantized, ref_logits)
    for (n, p), (_, q) in zip(tiny_llama.named_parameters(), ref.named_parameters(), strict=True):
        assert torch.equal(p.grad, q.grad), n
    hist = tiny_llama.model.layers[0].self_attn.q_proj.amax_histories["input"]
    assert hist.count == 1  # the disabled pass recorded nothing
    assert torch.equal(tiny_llama(ids).logits.isfinite(), quantized.isfinite())  # back on after the block


def test_convert_leaves_skipped_modules_alone(tiny_llama):
    lm_head, embed = tiny_llama.lm_head, tiny_llama.model.embed_tokens
    names_before = [n for n, _ in tiny_llama.named_parameters()]
    params_before = [p for _, p in tiny_llama.named_parameters()]
    convert_to_fp8(tiny_llama, get_recipe("rowwise"))
    assert tiny_llama.lm_head is lm_head and type(lm_head) is nn.Linear
    assert tiny_llama.model.embed_tokens is embed
    convs = [n for n, m in tiny_llama.named_modules() if isinstance(m, FP8Linear)]
    assert len(convs) == 2 * 7  # q k v o gate up down per layer
    assert [n for n, _ in tiny_llama.named_parameters()] == names_before
    assert all(a is b for a, b in zip(tiny_llama.parameters(), params_before, strict=True))
    convert_to_bf16_emulation(tiny_llama, skip=("lm_head", "mlp"))
    assert isinstance(tiny_llama.model.layers[0].self_attn.q_proj, BF16Linear)
    assert isinstance(tiny_llama.model.layers[0].mlp.up_proj, FP8Linear)
    with pytest.raises(ValueError, match="recipe"):
        convert_to_fp8(tiny_llama, "tensorwise")


def test_bf16_linear_rounds_operands_and_output():
    torch.manual_seed(3)
    lin = nn.Linear(64, 48)
    x = torch.randn(10, 64)
    y = BF16Linear.from_linear(lin)(x)
    bf = lambda t: t.to(torch.bfloat16).float()  # noqa: E731
    expected = bf(bf(x) @ bf(lin.weight).t() + lin.bias)
    assert torch.equal(y, expected)


AFTER_AMX_INIT = """
import fp8rl, json, torch
from fp8rl.fp8.linear import _scaled_mm_padded
torch.manual_seed(0)
qa = torch.randn(33, 64).to(torch.float8_e4m3fn)
qb = torch.randn(40, 64).to(torch.float8_e4m3fn)
inv_a, inv_b = torch.tensor(0.7), torch.tensor(1.3)  # tensorwise: 0-d scales
amx = bool(torch._C._cpu._init_amx())  # what inductor does on its first compile on an AMX CPU
after = _scaled_mm_padded(qa, qb, inv_a, inv_b, torch.float32, 16)
want = (qa.float() @ qb.float().t()) * inv_a * inv_b
print(json.dumps({"amx": amx, "after": (after - want).abs().max().item()}))
"""


def test_the_cpu_scaled_mm_survives_amx_initialised_by_a_compile():
    """On an AMX CPU a torch.compile anywhere in the process makes torch hand a CPU `_scaled_mm` to oneDNN,
    which the numerics pin caps at AVX2 (no FP8 matmul there); the padded product must still come out (a
    child process: the AMX switch cannot be undone; on a CPU without AMX the switch is a no-op)."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", AFTER_AMX_INIT], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    assert r["after"] < 1e-3, r
