"""The fp16 variant's numerics: FP16 GEMMs in training and rollout, emulated like bf16's.

FP16 (Qi et al. 2025, "Defeating the Training-Inference Mismatch via FP16") keeps 10 mantissa bits where
bf16 keeps 7, at the price of a narrow range (max 65504, smallest subnormal 2^-24), which training
answers with dynamic loss scaling (fp8rl.engine.loss_scale). Here every GEMM operand is rounded to fp16
(round to nearest even; beyond the range it becomes ±inf, below it 0, as a cast does), the product is
computed in fp32 and the output rounded to fp16: `FP16Linear` for the policy (forward, grad-input and
grad-weight GEMMs; the gradients entering the backward are rounded to fp16 too, so an unscaled loss
underflows as real FP16 training does; weight gradients stay fp32, the fp32 main-grad), and the rollout
copy's linears. Always emulated, on the GPU too. Master weights, embeddings and `lm_head` stay fp32.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from fp8rl.fp8.convert import DEFAULT_SKIP, swap_linears
from fp8rl.fp8.linear import QuantizedLinearBase, emulated_linear_fn
from fp8rl.fp8.rollout_copy import RolloutLinear, make_rollout_policy
from fp8rl.fp8.runtime import FP8Runtime


def round_to_fp16(x: torch.Tensor) -> torch.Tensor:
    """`x` rounded to float16 (RNE; overflow to ±inf, underflow to 0) and returned in x's dtype."""
    return x.to(torch.float16).to(x.dtype)


def _fp32_mm(a: torch.Tensor, b: torch.Tensor, *, out_fp32: bool = False) -> torch.Tensor:
    """`a @ b` in fp32 on fp16-valued operands: FP16 GEMMs are emulated everywhere, the GPU included."""
    return a @ b


_FP16LinearFn = emulated_linear_fn("_FP16LinearFn", round_to_fp16, _fp32_mm)


class FP16Linear(QuantizedLinearBase):
    """Linear layer emulating FP16 GEMMs: operands rounded to fp16, fp32 compute, fp16-rounded output."""

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> FP16Linear:
        return cls._wrap(linear)

    def quantized_forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FP16LinearFn.apply(x, self.weight, self.bias)


def convert_to_fp16_emulation(model: nn.Module, skip: Iterable[str] = DEFAULT_SKIP) -> nn.Module:
    """Replace the linears of `model` (not those in `skip`) by FP16-emulating `FP16Linear`s, in place."""
    return swap_linears(model, FP16Linear.from_linear, skip)


class FP16RolloutLinear(RolloutLinear):
    """The rollout copy's linear in FP16: weight rounded at refresh, activations and output per call."""

    @torch.no_grad()
    def requantize(self) -> None:
        self.weight_q = round_to_fp16(self.weight.detach().float())

    def quantized_forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.float()
        y = F.linear(round_to_fp16(x.float()), self.weight_q, bias)
        return round_to_fp16(y).to(x.dtype)


def make_fp16_rollout_policy(
    policy: nn.Module, *, skip: Iterable[str] = DEFAULT_SKIP, runtime: FP8Runtime | None = None
) -> nn.Module:
    """The rollout copy of `policy` (fp8rl.fp8.rollout_copy) with FP16 linears and a full-precision KV
    cache: an FP16 rollout engine."""
    rollout = make_rollout_policy(policy, None, kv_cache_fp8=False, skip=skip, runtime=runtime)
    for mod in rollout.modules():
        if type(mod) is RolloutLinear:
            mod.__class__ = FP16RolloutLinear
            mod.requantize()
    return rollout
