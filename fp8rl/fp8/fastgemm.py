"""Real low-precision GEMMs on CPU: the `fast` numerics mode's kernels (fp8rl.numerics), never taken in
`reproducible` mode.

In `reproducible` mode every bf16 and FP8 GEMM is emulated (docs/architecture.md#emulation-on-cpu): its
operands rounded to the format, an fp32 GEMM, the output rounded. That pinned path is kept as it is. In
`fast` mode, on a CPU whose oneDNN has bf16 GEMM kernels, GEMMs run in bf16 for real:

- the bf16 variant: bf16 operands, products summed in fp32 by oneDNN, bf16 output: what a bf16 trainer
  (torch autocast, TRL's `bf16=True`) computes, the weight gradient included (bf16 output, cast to fp32);
- FP8 (`fp8_mm`): FP8 values are exact in bf16 (e4m3's 4 and e5m2's 3 significant bits, exponents well
  inside bf16's range), so the quantized operands, unscaled, go into a bf16 GEMM whose products are summed
  in fp32, and the scales are applied to the output in fp32: per tensor, per row of `a`, per column of
  `b` (tensorwise, delayed). Blockwise runs one partial product per 128-wide K block, each promoted to fp32
  and scaled by its row and column block scales before the partials are summed (DeepGEMM's promotion).
  Power-of-two scales (MX's E8M0, the rowwise recipe's) are folded into the operands, exactly, and the
  GEMM's output is the product. The GEMM writes bf16: each output (each blockwise partial) is rounded
  to bf16 once more than an FP8 GEMM with an fp32 accumulator would; the FP8 layers round their outputs
  to bf16 anyway. Bound against the fp32 emulation, elementwise: |fast - emulated| <= 2^-7 * (|A| |B|ᵀ),
  the product of the dequantized operands' magnitudes (tested, tests/unit/fp8/test_fp8_fastgemm.py).

Dispatch (`use_real`): a rule per rounding dtype and CPU feature, from the grid
`benchmarks/lowp_gemm.py` measures: a real GEMM when the CPU has the feature and the GEMM has at least
`min_macs` multiply-adds (below it oneDNN's ~15 us per call loses to MKL's fp32 GEMM). The rule is looked
up once per process (`rule()`); per GEMM only its size is compared. `FP8RL_FAST_GEMM=real|emulated`
overrides the rule (fast mode only). Measured on the project's machine (AMD EPYC, AVX512_BF16, no AMX):
bf16 GEMMs 3-12x fp32's from 2M multiply-adds up, slower below 1M; on an AMX Xeon (torch 2.13, 2
threads) bf16 lost at 512x128x512 (11 vs 24 GFLOP/s) and won from 2048x576x1536 up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

import torch

from fp8rl import numerics

ENV = "FP8RL_FAST_GEMM"
# (CPU flag, smallest GEMM in multiply-adds worth a real GEMM), first match wins, per rounding dtype.
RULES: dict[torch.dtype, tuple[tuple[str, int], ...]] = {
    # AMX: the Xeon figures (crossover between 2^25 and 2^31 MACs; not measured here)
    # AVX512_BF16 without AMX: measured here, crossover 1-2M MACs at 1 and 2 threads
    torch.bfloat16: (("amx_bf16", 1 << 28), ("avx512_bf16", 1 << 21)),
    # fp16: not measured on any machine yet: no real fp16 GEMMs until someone does
    torch.float16: (),
}
# oneDNN ISA caps that still allow bf16 kernels
_ONEDNN_BF16_ISAS = ("ALL", "DEFAULT", "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX10_1_512",
                     "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16", "AVX10_1_512_AMX", "AVX10_1_512_AMX_FP16",
                     "AVX10_2_512", "AVX10_2_512_AMX_2")  # fmt: skip


@dataclass(frozen=True)
class Rule:
    """Whether this process runs real GEMMs in one dtype, and from which size (multiply-adds)."""

    dtype: torch.dtype
    enabled: bool
    min_macs: int
    reason: str

    def use_real(self, m: int, k: int, n: int) -> bool:
        return self.enabled and m * k * n >= self.min_macs


def _rule(dtype: torch.dtype, mode: str, flags: tuple[str, ...], environ) -> Rule:
    if mode != "fast":
        return Rule(dtype, False, 0, f"numerics {mode!r}: emulated (the pinned path)")
    forced = environ.get(ENV, "")
    if forced not in ("", "real", "emulated"):
        raise ValueError(f"{ENV}={forced!r}: allowed values are real, emulated")
    if forced == "emulated":
        return Rule(dtype, False, 0, f"{ENV}=emulated")
    if forced == "real":
        return Rule(dtype, True, 0, f"{ENV}=real")
    cap = environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if cap and cap not in _ONEDNN_BF16_ISAS:
        return Rule(dtype, False, 0, f"ONEDNN_MAX_CPU_ISA={cap} has no {dtype} GEMM kernels")
    for flag, min_macs in RULES.get(dtype, ()):
        if flag in flags:
            return Rule(dtype, True, min_macs, f"{flag}: real from {min_macs} multiply-adds")
    return Rule(dtype, False, 0, f"no CPU feature that makes {dtype} GEMMs faster than fp32 here")


@cache
def rule(dtype: torch.dtype = torch.bfloat16) -> Rule:
    """This process's dispatch rule for real GEMMs in `dtype` (module docstring), decided once."""
    return _rule(dtype, numerics.active_mode(), tuple(numerics.cpu()["isa"]), os.environ)


def enabled(dtype: torch.dtype = torch.bfloat16) -> bool:
    """True when this process may run real GEMMs in `dtype`: `fast` numerics on a machine that has them."""
    return rule(dtype).enabled


def mm(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype, r: Rule | None = None) -> torch.Tensor:
    """`a @ b` of two `dtype` tensors ([M, K] @ [K, N]) with a `dtype` output: a real GEMM where the rule
    says it is faster, else the emulation (fp32 GEMM, output rounded to `dtype`): the same values up to
    the order of the fp32 sums."""
    r = r or rule(dtype)
    if r.use_real(a.shape[0], a.shape[1], b.shape[1]):
        return a @ b
    return (a.float() @ b.float()).to(dtype)


# ------------------------------------------------------------------------------------------------ FP8


@dataclass(frozen=True)
class Operand:
    """One FP8 GEMM operand ready for a bf16 GEMM: `values` in bf16 (contraction along the last dim) and
    the scale still to apply to the output, or `scale=None` when power-of-two scales are folded into
    `values` (then `values` is the fake-quantized operand itself)."""

    values: torch.Tensor
    scale: torch.Tensor | None
    tiling: object

    def t(self) -> Operand:
        """The operand transposed (a 2-D tensor whose scale does not depend on the axis: tensorwise or
        block2d, or folded), for reuse in another GEMM."""
        from fp8rl.fp8.tiling import Granularity

        scale = self.scale
        if scale is not None and self.tiling.granularity is Granularity.BLOCK2D:
            scale = scale.t()
        elif scale is not None and self.tiling.granularity is not Granularity.TENSORWISE:
            raise ValueError("Operand.t: only tensorwise, block2d or folded operands can be transposed")
        return Operand(self.values.t(), scale, self.tiling)


def pow2_scaled(spec) -> bool:
    """True when `spec`'s scales are powers of two, so they fold into bf16 operands exactly."""
    from fp8rl.fp8.tiling import Granularity

    return spec.tiling.granularity is Granularity.MX or spec.tiling.pow2_scales


def prepare(x: torch.Tensor, spec, scale: torch.Tensor | None = None) -> Operand:
    """`x` quantized per `spec` (an OperandSpec; contraction along the last dim): its FP8 values, unscaled
    and exact in bf16, and its scale; for power-of-two scales the FP8 values over their scales, exact in
    bf16 too (`Operand`). `scale` overrides the dynamic scale (delayed scaling)."""
    from fp8rl.fp8.formats import round_to_grid_
    from fp8rl.fp8.quantize import _inner_contiguous, fake_quantize_tiled, tensor_to_scale

    f, tiling = spec.format, spec.tiling
    x = x.float()
    if pow2_scaled(spec):
        return Operand(fake_quantize_tiled(x, f, tiling, scale=scale).to(torch.bfloat16), None, tiling)
    x = _inner_contiguous(x, tiling)
    if scale is None:
        scale = tensor_to_scale(x, f, tiling)
    if tiling.tiled:
        y = round_to_grid_(tiling.tiles(x) * tiling.tile_scale(scale), f)
        return Operand(tiling.untile(y, x.shape).to(torch.bfloat16), scale, tiling)
    return Operand(round_to_grid_(x * scale, f).to(torch.bfloat16), scale, tiling)


def fp8_mm(a: Operand, b: Operand, *, bf16_out: bool = False) -> torch.Tensor:
    """`a · bᵀ` ([M, K] · [N, K]ᵀ) of two prepared FP8 operands, as FP8 hardware computes it (module
    docstring): a bf16 GEMM of the FP8 values, products summed in fp32, the scales applied to its output
    in fp32 (per K block for blockwise). fp32 result, or with `bf16_out` the result rounded to bf16 (what
    the FP8 layers keep of their outputs; one pass less)."""
    if _tiled(a) or _tiled(b):
        out = _blockwise(a, b)
        return out.to(torch.bfloat16) if bf16_out else out
    out = a.values @ b.values.t()  # bf16
    inv_a = None if a.scale is None else a.scale.reciprocal()  # () or [M, 1]
    inv_b = None if b.scale is None else b.scale.reciprocal().reshape(-1)  # () or [N]
    if inv_a is None and inv_b is None:
        return out if bf16_out else out.float()
    if (inv_a is None or inv_a.dim() == 0) and (inv_b is None or inv_b.dim() == 0):
        inv = float((inv_a if inv_b is None else inv_b if inv_a is None else inv_a * inv_b).item())
        # in place on the bf16 output: the product in fp32 (bf16's opmath), rounded to bf16 once
        return out.mul_(inv) if bf16_out else out.float().mul_(inv)
    out = out.float()
    if inv_a is not None:
        out.mul_(inv_a)
    if inv_b is not None:
        out.mul_(inv_b)
    return out.to(torch.bfloat16) if bf16_out else out


def _tiled(op: Operand) -> bool:
    return op.scale is not None and op.tiling.tiled


def _k_block_scales(op: Operand, rows: int) -> torch.Tensor:
    """[nk, rows, 1] (or broadcastable) fp32 inverse scales of one operand per K block: block1d scales are
    [rows, nk], block2d [row tiles, nk] (each row tile's scale repeated over its rows); tensorwise and
    rowwise broadcast; folded scales are 1."""
    from fp8rl.fp8.tiling import Granularity

    if op.scale is None:
        return torch.ones(1, 1, 1)
    inv = op.scale.reciprocal()
    g = op.tiling.granularity
    if g is Granularity.TENSORWISE:
        return inv.reshape(1, 1, 1)
    if g is Granularity.ROWWISE:
        return inv.reshape(1, rows, 1)
    if g is Granularity.BLOCK2D:
        inv = inv.repeat_interleave(op.tiling.block, dim=0)[:rows]
    return inv.t().unsqueeze(-1).contiguous()


def _blockwise(a: Operand, b: Operand) -> torch.Tensor:
    """One bf16 partial product per K block (128 wide), each promoted to fp32 and scaled by its row's and
    column's block scales, the partials summed in fp32 (in K order)."""
    m, k = a.values.shape
    n = b.values.shape[0]
    block = a.tiling.block if _tiled(a) else b.tiling.block
    sa, sb = _k_block_scales(a, m), _k_block_scales(b, n)
    out = None
    for i, k0 in enumerate(range(0, k, block)):
        partial = a.values[:, k0 : k0 + block] @ b.values[:, k0 : k0 + block].t()  # bf16 [M, N]
        scaled = torch.mul(partial, sa[i if sa.shape[0] > 1 else 0])  # fp32 (type promotion)
        row = sb[i if sb.shape[0] > 1 else 0].reshape(1, -1) if sb.shape[1] > 1 else sb.reshape(())
        out = scaled.mul_(row) if out is None else out.addcmul_(scaled, row)
    return out
