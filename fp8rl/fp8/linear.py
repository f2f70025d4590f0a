"""FP8 and bf16-emulation linear layers whose forward and backward GEMMs quantize their operands.

`FP8Linear` runs the three GEMMs of `y = x Wᵀ + b` through one custom autograd function, each operand
quantized per the recipe along that GEMM's contraction dim (fp8rl.fp8.recipe):
output `x·Wᵀ`, grad-input `dy·W`, grad-weight `dyᵀ·x`. A GEMM whose two operands have tensorwise or
rowwise scales runs as a real FP8 GEMM through `torch._scaled_mm` when the backend is `scaled_mm`
(fp8rl.fp8.backend; on CUDA every dim is zero-padded to a multiple of 16, which leaves the product
unchanged); otherwise it is emulated: operands fake-quantized, fp32 matmul (docs/architecture.md#emulation-on-cpu). The layer
picks each GEMM's path once, when it is made and whenever it is moved (`.to()`, `.cuda()`), not per
call, and counts the GEMMs it runs per path in its `FP8Runtime` (fp8rl.fp8.runtime).
Outputs and input gradients are rounded to bf16, as FP8 GEMMs emit bf16; weight gradients stay fp32
(the fp32 main-grad accumulation of Megatron/TE). `BF16Linear` is the bf16 variant's layer: operands
rounded to bf16, fp32 compute, bf16-rounded outputs; on CUDA its GEMMs are real bf16 GEMMs (bf16
operands, fp32 accumulation in the tensor cores, bf16 output; weight gradients in fp32).

Both keep `nn.Linear`'s parameters (`weight`, `bias`: the same Parameter objects, the same state-dict
keys) and compute exactly `F.linear(x, weight, bias)` while `quant_enabled` is False (or the
bf16-emulated GEMM of `BF16Linear` when `disabled_as_bf16` is set too)
(fp8rl.fp8.convert.quantization_disabled).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fp8rl.fp8 import fastgemm
from fp8rl.fp8.backend import gemm_backend, gemm_path
from fp8rl.fp8.formats import round_to_bf16
from fp8rl.fp8.quantize import fake_quantize_tiled, quantize_tiled, tensor_to_amax
from fp8rl.fp8.recipe import GemmSpec, OperandSpec, Recipe
from fp8rl.fp8.runtime import FP8Runtime, GemmCounter
from fp8rl.fp8.scaling import AmaxHistory


def delayed_scale(t: torch.Tensor, spec: OperandSpec, hist: AmaxHistory | None) -> torch.Tensor | None:
    """For a delayed operand: the scale from its amax history (recording `t`'s amax for the next
    step); None for dynamic (current) scaling, where the scale comes from `t` itself."""
    if hist is None or not spec.delayed:
        return None
    scale = hist.scale(spec.fmt, t.device)
    hist.record(tensor_to_amax(t.detach()))
    return scale


def quantize_operand(
    t: torch.Tensor,
    spec: OperandSpec,
    *,
    scale: torch.Tensor | None = None,
    compiled: bool = False,
    noise_scale: float = 1.0,
) -> torch.Tensor:
    """`t` (contraction along its last dim) fake-quantized per `spec` in fp32; `scale` overrides the
    dynamic scale (delayed scaling); `compiled` uses the `torch.compile`d kernel (same values);
    `noise_scale` scales the quantization error (fp8rl.fp8.quantize.amplify_error)."""
    return fake_quantize_tiled(
        t.float(), spec.format, spec.tiling, scale=scale, compiled=compiled, noise_scale=noise_scale
    )


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
    try:
        out = torch._scaled_mm(qa, qb.t(), scale_a=inv_a, scale_b=inv_b, out_dtype=out_dtype)
    except RuntimeError as err:
        if qa.device.type != "cpu" or "primitive descriptor" not in str(err):
            raise
        # On a CPU with AMX, once inductor has initialised AMX (any torch.compile in the process), torch
        # hands a CPU _scaled_mm to oneDNN, which the numerics pin caps at AVX2, where oneDNN has no FP8
        # matmul. The product torch's own CPU kernel computes instead: FP8 values (exact in fp32) times
        # the scales, summed in fp32.
        out = ((qa.float() @ qb.float().t()) * inv_a * inv_b).to(out_dtype)
    return out[:m, :n] if pm or pn else out


def fp8_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    spec: GemmSpec,
    *,
    path: str = "emulated",
    scale_a: torch.Tensor | None = None,
    scale_b: torch.Tensor | None = None,
    a_quantized: torch.Tensor | None = None,
    b_quantized: torch.Tensor | None = None,
    counter: GemmCounter | None = None,
    compiled: bool = False,
    noise_scale: float = 1.0,
) -> torch.Tensor:
    """`a · bᵀ` (a: [M, K], b: [N, K]) with both operands quantized along K per `spec`, fp32 result.

    `path` is the GEMM's path (fp8rl.fp8.backend.gemm_path: `scaled_mm` only for a `spec` that
    `_scaled_mm` computes); `scale_a`/`scale_b` are given scales (delayed scaling; None: computed from
    the operand); `a_quantized`/`b_quantized` are already fake-quantized operands to reuse, which makes
    the GEMM emulated. `counter` records the path that ran; `compiled` and `noise_scale` as in
    `quantize_operand` (`noise_scale` != 1 needs the emulated path)."""
    reused = a_quantized is not None or b_quantized is not None
    if path == "scaled_mm" and noise_scale != 1.0:
        raise ValueError("fp8_gemm: noise_scale != 1 is emulated only; use path='emulated'")
    if path == "scaled_mm" and not reused:
        qa, sa = quantize_tiled(a.float(), spec.a.format, spec.a.tiling, scale=scale_a)
        qb, sb = quantize_tiled(b.float(), spec.b.format, spec.b.tiling, scale=scale_b)
        inv_a, inv_b = sa.reciprocal(), sb.reciprocal().reshape(1, -1) if sb.dim() else sb.reciprocal()
        if inv_a.dim() != inv_b.dim():  # one rowwise, one tensorwise: expand the tensorwise one
            inv_a = inv_a.expand(a.shape[0], 1).contiguous() if inv_a.dim() == 0 else inv_a
            inv_b = inv_b.expand(1, b.shape[0]).contiguous() if inv_b.dim() == 0 else inv_b
        # cuBLASLt's rowwise-scaled FP8 GEMM emits bf16 only; tensorwise (and the CPU kernel) emit fp32
        rowwise = "rowwise" in (spec.a.granularity, spec.b.granularity)
        out_dtype = torch.bfloat16 if a.is_cuda and rowwise else torch.float32
        if counter is not None:
            counter.add("scaled_mm")
        multiple = CUBLAS_MULTIPLE if a.is_cuda else 1
        return _scaled_mm_padded(qa, qb, inv_a, inv_b, out_dtype, multiple).float()
    fa, fb = a_quantized, b_quantized
    if fa is None:
        fa = quantize_operand(a, spec.a, scale=scale_a, compiled=compiled, noise_scale=noise_scale)
    if fb is None:
        fb = quantize_operand(b, spec.b, scale=scale_b, compiled=compiled, noise_scale=noise_scale)
    if counter is not None:
        counter.add("emulated")
    return fa @ fb.t()


def _reusable(first: OperandSpec, second: OperandSpec) -> bool:
    """A tensor quantized for one GEMM can serve the other when both specs agree and do not depend on
    the contraction axis."""
    return first == second and first.axis_free


class _FP8LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, layer):  # type: ignore[override]
        out, gi, gw = layer.recipe.gemms()
        path = layer.gemm_paths[0]
        rt: FP8Runtime = layer.runtime
        h: dict[str, AmaxHistory] = layer.amax_histories
        x2 = x.reshape(-1, x.shape[-1])
        sx = delayed_scale(x2, out.a, h.get("input"))
        sw = delayed_scale(weight, out.b, h.get("weight"))
        emulate = path == "emulated"
        noise = rt.noise_scale
        x_q = (
            quantize_operand(x2, out.a, scale=sx, compiled=rt.compiled, noise_scale=noise)
            if emulate
            else None
        )
        w_q = (
            quantize_operand(weight, out.b, scale=sw, compiled=rt.compiled, noise_scale=noise)
            if emulate
            else None
        )
        y = fp8_gemm(x2, weight, out, path=path, scale_a=sx, scale_b=sw, a_quantized=x_q, b_quantized=w_q,
                     counter=rt.gemms, compiled=rt.compiled, noise_scale=noise)  # fmt: skip
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
        _, gi_path, gw_path = layer.gemm_paths
        rt: FP8Runtime = layer.runtime
        dy2 = dy.reshape(-1, dy.shape[-1]).float()
        sdy = delayed_scale(dy2, gi.a, layer.amax_histories.get("grad_output"))
        dy_q = None
        if gi_path == gw_path == "emulated" and _reusable(gi.a, gw.a):
            dy_q = quantize_operand(dy2, gi.a, scale=sdy, compiled=rt.compiled, noise_scale=rt.noise_scale)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx2 = fp8_gemm(dy2, weight.t(), gi, path=gi_path, scale_a=sdy, scale_b=sw, a_quantized=dy_q,
                           b_quantized=None if w_q is None else w_q.t(), counter=rt.gemms,
                           compiled=rt.compiled, noise_scale=rt.noise_scale)  # fmt: skip
            dx = round_to_bf16(dx2).reshape(ctx.x_shape).to(dy.dtype)
        if ctx.needs_input_grad[1]:
            xt = x_q.t() if x_q is not None else x2.t()
            dw = fp8_gemm(dy2.t(), xt, gw, path=gw_path, scale_a=sdy, scale_b=sx,
                          a_quantized=None if dy_q is None else dy_q.t(),
                          b_quantized=None if x_q is None else xt, counter=rt.gemms,
                          compiled=rt.compiled, noise_scale=rt.noise_scale)  # fmt: skip
            dw = dw.to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy2.sum(0).to(weight.dtype)
        return dx, dw, db, None


def _bf16_mm(a: torch.Tensor, b: torch.Tensor, *, out_fp32: bool = False) -> torch.Tensor:
    """`a @ b` of bf16-valued fp32 operands, as fp32: a real bf16 GEMM on CUDA (its output rounded to
    bf16 unless `out_fp32`, where cuBLAS writes the fp32 accumulator), else fp32 compute (emulation)."""
    if not a.is_cuda:
        return a @ b
    if out_fp32:
        return torch.mm(a.bfloat16(), b.bfloat16(), out_dtype=torch.float32)
    return (a.bfloat16() @ b.bfloat16()).float()


def emulated_linear_fn(name: str, round_fn, mm) -> type[torch.autograd.Function]:
    """The autograd linear of a 16-bit format emulated on fp32: every GEMM operand and the forward and
    grad-input outputs rounded by `round_fn`, products by `mm(a, b, out_fp32=...)`; the weight gradient
    stays fp32 (the fp32 main-grad). bf16 (`_bf16_mm`: a real bf16 GEMM on CUDA) and fp16
    (fp8rl.fp8.fp16) share it; `name` names the class (and its autograd node, `{name}Backward`)."""

    def forward(ctx, x, weight, bias):
        x2 = round_fn(x.reshape(-1, x.shape[-1]).float())
        w = round_fn(weight.float())
        y = mm(x2, w.t())
        if bias is not None:
            y = y + bias.float()
        ctx.save_for_backward(x2, w)
        ctx.has_bias = bias is not None
        ctx.x_shape = x.shape
        return round_fn(y).to(x.dtype).reshape(*x.shape[:-1], weight.shape[0])

    def backward(ctx, dy):
        x2, w = ctx.saved_tensors
        dy2 = round_fn(dy.reshape(-1, dy.shape[-1]).float())
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = round_fn(mm(dy2, w)).reshape(ctx.x_shape).to(dy.dtype)
        if ctx.needs_input_grad[1]:
            dw = mm(dy2.t(), x2, out_fp32=True)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy2.sum(0)
        return dx, dw, db

    body = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    return type(name, (torch.autograd.Function,), body)


_BF16LinearFn = emulated_linear_fn("_BF16LinearFn", round_to_bf16, _bf16_mm)


def _fast_fp8_gemm(
    a, b, spec, rule, rt: FP8Runtime, *, scale_a=None, scale_b=None, qa=None, qb=None, bf16_out=False
):
    """One GEMM of `_FastFP8LinearFn`: a real bf16 GEMM of the FP8 values (fp8rl.fp8.fastgemm) when the
    rule takes this size, else the emulated one (`fp8_gemm`); `qa`/`qb` prepared operands to reuse;
    `bf16_out`: the result may come rounded to bf16 (fp32 otherwise)."""
    m, k, n = a.shape[0], a.shape[1], b.shape[0]
    if not rule.use_real(m, k, n):
        return fp8_gemm(a, b, spec, scale_a=scale_a, scale_b=scale_b, counter=rt.gemms)
    qa = qa if qa is not None else fastgemm.prepare(a, spec.a, scale_a)
    qb = qb if qb is not None else fastgemm.prepare(b, spec.b, scale_b)
    rt.gemms.add("bf16")
    return fastgemm.fp8_mm(qa, qb, bf16_out=bf16_out)


class _FastFP8LinearFn(torch.autograd.Function):
    """`_FP8LinearFn` in the `fast` numerics mode: the same quantization, each GEMM a real bf16 GEMM of
    the FP8 values with the scales applied to its output (fp8rl.fp8.fastgemm), or emulated where that is
    slower. Noise doses other than 1 never come here (not FP8 values)."""

    @staticmethod
    def forward(ctx, x, weight, bias, layer):  # type: ignore[override]
        out, gi, gw = layer.recipe.gemms()
        rt: FP8Runtime = layer.runtime
        rule = fastgemm.rule(torch.bfloat16)
        h: dict[str, AmaxHistory] = layer.amax_histories
        x2 = x.reshape(-1, x.shape[-1]).float()
        sx = delayed_scale(x2, out.a, h.get("input"))
        sw = delayed_scale(weight, out.b, h.get("weight"))
        real = rule.use_real(x2.shape[0], x2.shape[1], weight.shape[0])
        qx = fastgemm.prepare(x2, out.a, sx) if real else None
        qw = fastgemm.prepare(weight, out.b, sw) if real else None
        y = _fast_fp8_gemm(
            x2, weight, out, rule, rt, scale_a=sx, scale_b=sw, qa=qx, qb=qw, bf16_out=bias is None
        )
        if bias is not None:
            y = y + bias.float()
        # a weight whose quantization does not depend on the axis serves the grad-input GEMM transposed;
        # tensorwise activations the grad-weight GEMM
        keep_w = qw.t() if qw is not None and _reusable(out.b, gi.b) else None
        keep_x = qx.t() if qx is not None and _reusable(out.a, gw.b) else None
        ctx.layer, ctx.has_bias, ctx.x_shape = layer, bias is not None, x.shape
        ctx.keep = (keep_x, keep_w)
        ctx.save_for_backward(x2, weight, sx, sw)
        return round_to_bf16(y).to(x.dtype).reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        x2, weight, sx, sw = ctx.saved_tensors
        keep_x, keep_w = ctx.keep
        ctx.keep = None
        layer = ctx.layer
        _, gi, gw = layer.recipe.gemms()
        rt: FP8Runtime = layer.runtime
        rule = fastgemm.rule(torch.bfloat16)
        dy2 = dy.reshape(-1, dy.shape[-1]).float()
        sdy = delayed_scale(dy2, gi.a, layer.amax_histories.get("grad_output"))
        qdy = None
        if _reusable(gi.a, gw.a) and rule.use_real(dy2.shape[0], dy2.shape[1], weight.shape[1]):
            qdy = fastgemm.prepare(dy2, gi.a, sdy)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx2 = _fast_fp8_gemm(dy2, weight.t(), gi, rule, rt, scale_a=sdy, scale_b=sw, qa=qdy, qb=keep_w,
                                 bf16_out=True)  # fmt: skip
            dx = round_to_bf16(dx2).reshape(ctx.x_shape).to(dy.dtype)
        if ctx.needs_input_grad[1]:
            dw = _fast_fp8_gemm(dy2.t(), x2.t(), gw, rule, rt, scale_a=sdy, scale_b=sx,
                                qa=None if qdy is None else qdy.t(), qb=keep_x)  # fmt: skip
            dw = dw.to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy2.sum(0).to(weight.dtype)
        return dx, dw, db, None


class _RealLowpLinearFn(torch.autograd.Function):
    """`_BF16LinearFn` in the `fast` numerics mode (generic over the rounding dtype): operands cast to
    `dtype`, each GEMM a real `dtype` GEMM (fp32 sums, `dtype` output, weight gradient included: what a
    bf16 trainer computes) where the dispatch rule takes its size, else emulated (fp8rl.fp8.fastgemm.mm)."""

    @staticmethod
    def forward(ctx, x, weight, bias, dtype):  # type: ignore[override]
        rule = fastgemm.rule(dtype)
        x2 = x.reshape(-1, x.shape[-1]).to(dtype)
        w = weight.to(dtype)
        if bias is None:
            y = fastgemm.mm(x2, w.t(), dtype, rule)
        else:  # as the emulation: the bias added in fp32 before the output is rounded
            y = (fastgemm.mm(x2, w.t(), torch.float32, rule) + bias.float()).to(dtype)
        ctx.save_for_backward(x2, w)
        ctx.has_bias, ctx.x_shape, ctx.dtype = bias is not None, x.shape, dtype
        return y.to(x.dtype).reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        x2, w = ctx.saved_tensors
        dtype = ctx.dtype
        rule = fastgemm.rule(dtype)
        dy2 = dy.reshape(-1, dy.shape[-1]).to(dtype)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = fastgemm.mm(dy2, w, dtype, rule).reshape(ctx.x_shape).to(dy.dtype)
        if ctx.needs_input_grad[1]:
            dw = fastgemm.mm(dy2.t(), x2, dtype, rule).float()
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy2.float().sum(0)
        return dx, dw, db, None


def bf16_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, real: bool) -> torch.Tensor:
    """The bf16 variant's linear: real bf16 GEMMs (`real`: the layer's choice, fast numerics on CPU), else
    the emulated GEMMs of the pinned path (real on CUDA)."""
    if real and not x.is_cuda:
        return _RealLowpLinearFn.apply(x, weight, bias, torch.bfloat16)
    return _BF16LinearFn.apply(x, weight, bias)


class QuantizedLinearBase(nn.Linear):
    """An `nn.Linear` built around an existing layer's Parameters; `quant_enabled=False` makes it a plain
    `F.linear`."""

    quant_enabled: bool
    real_bf16: bool = False
    # With quantization off: the plain fp32 `F.linear`, or the bf16-emulated GEMM (`BF16Linear`'s).
    disabled_as_bf16: bool = False

    @classmethod
    def _wrap(cls, linear: nn.Linear) -> QuantizedLinearBase:
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight = linear.weight
        new.bias = linear.bias
        new.quant_enabled = True
        new.disabled_as_bf16 = False
        # real bf16 GEMMs in the `fast` numerics mode (fp8rl.fp8.fastgemm), decided once per layer
        new.real_bf16 = fastgemm.enabled(torch.bfloat16)
        new.train(linear.training)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.quant_enabled:
            if self.disabled_as_bf16:
                return bf16_linear(x, self.weight, self.bias, self.real_bf16)
            return F.linear(x, self.weight, self.bias)
        return self.quantized_forward(x)

    def quantized_forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class FP8Linear(QuantizedLinearBase):
    """Linear layer whose three GEMMs run in FP8 per `recipe` (module docstring).

    `backend` is the layer's GEMM backend: the one asked for, else `gemm_backend` of the weight's device
    for a recipe `_scaled_mm` computes exactly and `emulated` otherwise; `gemm_paths` is each GEMM's path
    (output, grad-input, grad-weight) under it. Both are resolved when the layer is made and again
    whenever it is moved to another device. `runtime` holds the compile switch and the GEMM counter."""

    recipe: Recipe
    backend: str
    gemm_paths: tuple[str, str, str]
    real_bf16_fp8: bool
    runtime: FP8Runtime
    amax_histories: dict[str, AmaxHistory]
    _asked_backend: str | None

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        recipe: Recipe,
        *,
        backend: str | None = None,
        runtime: FP8Runtime | None = None,
    ) -> FP8Linear:
        new = cls._wrap(linear)
        new.recipe = recipe
        new.runtime = runtime if runtime is not None else FP8Runtime.from_env()
        new._asked_backend = backend
        new._resolve_paths()
        roles = ("input", "weight", "grad_output")
        new.amax_histories = (
            {r: AmaxHistory(recipe.amax_history_len, recipe.amax_compute_algo) for r in roles}
            if recipe.delayed
            else {}
        )
        return new

    def _resolve_paths(self) -> None:
        device = self.weight.device
        # `_scaled_mm` computes real FP8 products: a recipe it cannot compute exactly, or a noise dose
        # other than 1, is emulated.
        exact = self.recipe.scaled_mm_exact and self.runtime.noise_scale == 1.0
        auto = gemm_backend(device) if exact else "emulated"
        self.backend = self._asked_backend or auto
        out, gi, gw = (gemm_path(g, self.backend, device) for g in self.recipe.gemms())
        self.gemm_paths = (out, gi, gw)
        # `fast` numerics on CPU: the emulated GEMMs run as real bf16 GEMMs of the FP8 values
        # (fp8rl.fp8.fastgemm); FP8 values only, so not under a noise dose other than 1
        self.real_bf16_fp8 = (
            device.type == "cpu"
            and self.gemm_paths == ("emulated",) * 3
            and self.runtime.noise_scale == 1.0
            and fastgemm.enabled(torch.bfloat16)
        )

    def _apply(self, fn, *args, **kwargs):
        """`nn.Module`'s hook behind `.to()`/`.cuda()`/`.cpu()`: the GEMM paths follow the new device."""
        module = super()._apply(fn, *args, **kwargs)
        self._resolve_paths()
        return module

    def quantized_forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.real_bf16_fp8:
            return _FastFP8LinearFn.apply(x, self.weight, self.bias, self)
        return _FP8LinearFn.apply(x, self.weight, self.bias, self)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, recipe={self.recipe.name}, backend={self.backend}"


class BF16Linear(QuantizedLinearBase):
    """Linear layer emulating bf16 GEMMs: operands rounded to bf16, fp32 compute, bf16-rounded output."""

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> BF16Linear:
        return cls._wrap(linear)

    def quantized_forward(self, x: torch.Tensor) -> torch.Tensor:
        return bf16_linear(x, self.weight, self.bias, self.real_bf16)
