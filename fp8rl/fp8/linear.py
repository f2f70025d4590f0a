"""FP8 and bf16-emulation linear layers whose forward and backward GEMMs quantize their operands.

`FP8Linear` runs the three GEMMs of `y = x Wᵀ + b` through one custom autograd function, each operand
quantized per the recipe along that GEMM's contraction dim (fp8rl.fp8.recipe):
output `x·Wᵀ`, grad-input `dy·W`, grad-weight `dyᵀ·x`. A GEMM whose two operands have tensorwise or
rowwise scales runs as a real FP8 GEMM through `torch._scaled_mm` when the backend is `scaled_mm`
(fp8rl.fp8.backend; on CUDA every dim is zero-padded to a multiple of 16, which leaves the product
unchanged); otherwise it is emulated: operands fake-quantized, fp32 matmul (DESIGN.md §8).
Outputs and input gradients are rounded to bf16, as FP8 GEMMs emit bf16; weight gradients stay fp32
(the fp32 main-grad accumulation of Megatron/TE). `BF16Linear` is the bf16 variant's layer: operands
rounded to bf16, fp32 compute, bf16-rounded outputs.

Both keep `nn.Linear`'s parameters (`weight`, `bias`: the same Parameter objects, the same state-dict
keys) and compute exactly `F.linear(x, weight, bias)` while `quant_enabled` is False
(fp8rl.fp8.convert.quantization_disabled).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fp8rl.fp8.backend import count_gemm, gemm_backend
from fp8rl.fp8.formats import round_to_bf16
from fp8rl.fp8.quantize import abs_max, fake_quantize, quantize
from fp8rl.fp8.recipe import GemmSpec, OperandSpec, Recipe
from fp8rl.fp8.scaling import AmaxHistory

_SCALED_MM_OK = ("tensorwise", "rowwise")


def delayed_scale(t: torch.Tensor, spec: OperandSpec, hist: AmaxHistory | None) -> torch.Tensor | None:
    """For a delayed operand: the scale from its amax history (recording `t`'s amax for the next
    step); None for dynamic (current) scaling, where the scale comes from `t` itself."""
    if hist is None or not spec.delayed:
        return None
    scale = hist.scale(spec.fmt, t.device)
    hist.record(abs_max(t.detach()))
    return scale


def quantize_operand(
    t: torch.Tensor, spec: OperandSpec, *, scale: torch.Tensor | None = None
) -> torch.Tensor:
    """`t` (contraction along its last dim) fake-quantized per `spec` in fp32; `scale` overrides the
    dynamic scale (delayed scaling)."""
    return fake_quantize(
        t.float(), spec.fmt, spec.granularity, block=spec.block, pow2_scales=spec.pow2_scales, scale=scale
    )


def _scaled_mm_ok(a: torch.Tensor, b: torch.Tensor, spec: GemmSpec) -> bool:
    if spec.a.granularity not in _SCALED_MM_OK or spec.b.granularity not in _SCALED_MM_OK:
        return False
    if spec.a.fmt == "e5m2" and spec.b.fmt == "e5m2":
        return False
    # cuBLASLt's rowwise-scaled FP8 GEMM takes e4m3 operands only (its dims are padded: _scaled_mm_padded)
    rowwise = "rowwise" in (spec.a.granularity, spec.b.granularity)
    return not (a.is_cuda and rowwise and "e5m2" in (spec.a.fmt, spec.b.fmt))


CUBLAS_MULTIPLE = 16  # cuBLASLt's FP8 GEMM needs every dim to be a multiple of 16


def _pad_fp8(q: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """`q` with `rows` zero rows and `cols` zero columns appended (through its bytes: 0x00 is +0 in both
    formats, and byte padding runs on every device)."""
    return F.pad(q.view(torch.uint8), (0, cols, 0, rows)).view(q.dtype)


def _scaled_mm_padded(
    qa: torch.Tensor, qb: torch.Tensor, inv_a: torch.Tensor, inv_b: torch.Tensor, out_dtype, multiple: int
) -> torch.Tensor:
    """`torch._scaled_mm(qa, qbᵀ)` (qa [M, K], qb [N, K] FP8; inverse scales 0-d, or [M, 1] and [1, N]) with
    every dim zero-padded to a multiple of `multiple` and the output cropped back to [M, N]: zero rows
    and zero contraction terms add nothing and padded rowwise scales are 1, so the product is the unpadded
    one, and odd token counts still run on the FP8 tensor cores."""
    m, k = qa.shape
    n = qb.shape[0]
    pm, pk, pn = (-m) % multiple, (-k) % multiple, (-n) % multiple
    if pm or pk:
        qa = _pad_fp8(qa, pm, pk)
    if pn or pk:
        qb = _pad_fp8(qb, pn, pk)
    if inv_a.dim() and pm:
        inv_a = F.pad(inv_a, (0, 0, 0, pm), value=1.0)
    if inv_b.dim() and pn:
        inv_b = F.pad(inv_b, (0, pn), value=1.0)
    out = torch._scaled_mm(qa, qb.t(), scale_a=inv_a, scale_b=inv_b, out_dtype=out_dtype)
    return out[:m, :n] if pm or pn else out


def fp8_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    spec: GemmSpec,
    *,
    backend: str = "emulated",
    scale_a: torch.Tensor | None = None,
    scale_b: torch.Tensor | None = None,
    a_quantized: torch.Tensor | None = None,
    b_quantized: torch.Tensor | None = None,
) -> torch.Tensor:
    """`a · bᵀ` (a: [M, K], b: [N, K]) with both operands quantized along K per `spec`, fp32 result.

    `scale_a`/`scale_b` are given scales (delayed scaling; None: computed from the operand);
    `a_quantized`/`b_quantized` are already fake-quantized operands to reuse (emulated path)."""
    reused = a_quantized is not None or b_quantized is not None
    if backend == "scaled_mm" and not reused and _scaled_mm_ok(a, b, spec):
        qa, sa = quantize(
            a.float(), spec.a.fmt, spec.a.granularity, pow2_scales=spec.a.pow2_scales, scale=scale_a
        )
        qb, sb = quantize(
            b.float(), spec.b.fmt, spec.b.granularity, pow2_scales=spec.b.pow2_scales, scale=scale_b
        )
        inv_a, inv_b = sa.reciprocal(), sb.reciprocal().reshape(1, -1) if sb.dim() else sb.reciprocal()
        if inv_a.dim() != inv_b.dim():  # one rowwise, one tensorwise: expand the tensorwise one
            inv_a = inv_a.expand(a.shape[0], 1).contiguous() if inv_a.dim() == 0 else inv_a
            inv_b = inv_b.expand(1, b.shape[0]).contiguous() if inv_b.dim() == 0 else inv_b
        # cuBLASLt's rowwise-scaled FP8 GEMM emits bf16 only; tensorwise (and the CPU kernel) emit fp32
        rowwise = "rowwise" in (spec.a.granularity, spec.b.granularity)
        out_dtype = torch.bfloat16 if a.is_cuda and rowwise else torch.float32
        count_gemm("scaled_mm")
        multiple = CUBLAS_MULTIPLE if a.is_cuda else 1
        return _scaled_mm_padded(qa, qb, inv_a, inv_b, out_dtype, multiple).float()
    fa = a_quantized if a_quantized is not None else quantize_operand(a, spec.a, scale=scale_a)
    fb = b_quantized if b_quantized is not None else quantize_operand(b, spec.b, scale=scale_b)
    count_gemm("emulated")
    return fa @ fb.t()


def _reusable(first: OperandSpec, second: OperandSpec) -> bool:
    """A tensor quantized for one GEMM can serve the other when both specs agree and do not depend on
    the contraction axis."""
    return first == second and first.axis_free


class _FP8LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, layer):  # type: ignore[override]
        out, gi, gw = layer.recipe.gemms()
        h: dict[str, AmaxHistory] = layer.amax_histories
        x2 = x.reshape(-1, x.shape[-1])
        sx = delayed_scale(x2, out.a, h.get("input"))
        sw = delayed_scale(weight, out.b, h.get("weight"))
        emulate = layer.backend == "emulated" or not _scaled_mm_ok(x2, weight, out)
        x_q = quantize_operand(x2, out.a, scale=sx) if emulate else None
        w_q = quantize_operand(weight, out.b, scale=sw) if emulate else None
        y = fp8_gemm(x2, weight, out, backend=layer.backend, scale_a=sx, scale_b=sw, a_quantized=x_q,
                     b_quantized=w_q)  # fmt: skip
        if bias is not None:
            y = y + bias.float()
        keep_x = x_q if x_q is not None and _reusable(out.a, gw.b) else None
        keep_w = w_q if w_q is not None and _reusable(out.b, gi.b) else None
        ctx.layer, ctx.has_bias, ctx.x_shape = layer, bias is not None, x.shape
        ctx.save_for_backward(x2 if keep_x is None else None, weight, keep_x, keep_w, sx, sw)
        return round_to_bf16(y).to(x.dtype).reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        x2, weight, x_q, w_q, sx, sw = ctx.saved_tensors
        layer = ctx.layer
        _, gi, gw = layer.recipe.gemms()
        backend = layer.backend
        dy2 = dy.reshape(-1, dy.shape[-1]).float()
        sdy = delayed_scale(dy2, gi.a, layer.amax_histories.get("grad_output"))
        dy_q = None
        if backend == "emulated" and _reusable(gi.a, gw.a):
            dy_q = quantize_operand(dy2, gi.a, scale=sdy)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx2 = fp8_gemm(dy2, weight.t(), gi, backend=backend, scale_a=sdy, scale_b=sw, a_quantized=dy_q,
                           b_quantized=None if w_q is None else w_q.t())  # fmt: skip
            dx = round_to_bf16(dx2).reshape(ctx.x_shape).to(dy.dtype)
        if ctx.needs_input_grad[1]:
            xt = x_q.t() if x_q is not None else x2.t()
            dw = fp8_gemm(dy2.t(), xt, gw, backend=backend, scale_a=sdy, scale_b=sx,
                          a_quantized=None if dy_q is None else dy_q.t(),
                          b_quantized=None if x_q is None else xt)  # fmt: skip
            dw = dw.to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy2.sum(0).to(weight.dtype)
        return dx, dw, db, None


class _BF16LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):  # type: ignore[override]
        x2 = round_to_bf16(x.reshape(-1, x.shape[-1]).float())
        w = round_to_bf16(weight.float())
        y = x2 @ w.t()
        if bias is not None:
            y = y + bias.float()
        ctx.save_for_backward(x2, w)
        ctx.has_bias = bias is not None
        ctx.x_shape = x.shape
        return round_to_bf16(y).to(x.dtype).reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        x2, w = ctx.saved_tensors
        dy2 = round_to_bf16(dy.reshape(-1, dy.shape[-1]).float())
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = round_to_bf16(dy2 @ w).reshape(ctx.x_shape).to(dy.dtype)
        if ctx.needs_input_grad[1]:
            dw = dy2.t() @ x2
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy2.sum(0)
        return dx, dw, db


class QuantizedLinearBase(nn.Linear):
    """An `nn.Linear` built around an existing layer's Parameters; `quant_enabled=False` makes it a plain
    `F.linear`."""

    quant_enabled: bool

    @classmethod
    def _wrap(cls, linear: nn.Linear) -> QuantizedLinearBase:
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight = linear.weight
        new.bias = linear.bias
        new.quant_enabled = True
        new.train(linear.training)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.quant_enabled:
            return F.linear(x, self.weight, self.bias)
        return self.quantized_forward(x)

    def quantized_forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class FP8Linear(QuantizedLinearBase):
    """Linear layer whose three GEMMs run in FP8 per `recipe` (module docstring)."""

    recipe: Recipe
    backend: str
    amax_histories: dict[str, AmaxHistory]

    @classmethod
    def from_linear(cls, linear: nn.Linear, recipe: Recipe, *, backend: str | None = None) -> FP8Linear:
        new = cls._wrap(linear)
        new.recipe = recipe
        new.backend = backend or (
            gemm_backend(linear.weight.device) if recipe.scaled_mm_exact else "emulated"
        )
        roles = ("input", "weight", "grad_output")
        new.amax_histories = (
            {r: AmaxHistory(recipe.amax_history_len, recipe.amax_compute_algo) for r in roles}
            if recipe.delayed
            else {}
        )
        return new

    def quantized_forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FP8LinearFn.apply(x, self.weight, self.bias, self)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, recipe={self.recipe.name}, backend={self.backend}"


class BF16Linear(QuantizedLinearBase):
    """Linear layer emulating bf16 GEMMs: operands rounded to bf16, fp32 compute, bf16-rounded output."""

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> BF16Linear:
        return cls._wrap(linear)

    def quantized_forward(self, x: torch.Tensor) -> torch.Tensor:
        return _BF16LinearFn.apply(x, self.weight, self.bias)
