"""The sampler's copy of the policy: FP8 weights (or bf16-emulated ones), refreshed from the trainer.

`make_rollout_policy(policy, recipe)` deep-copies the policy (a `transformers` causal LM), freezes it
and swaps its linears (not `skip`, as `convert_to_fp8`) for `RolloutLinear`s, which hold their weight
quantized once per refresh with the recipe's forward weight spec (per tensor / per output channel /
128×128 tiles / 1×32 MX tiles) and quantize activations dynamically with the recipe's forward input spec,
as vLLM's FP8 weights with dynamic activation scales. Delayed scaling has no meaning for inference: its
activations use current tensorwise scales. With `recipe=None` the copy emulates a bf16 engine (weights
and activations rounded to bf16; on CUDA a real bf16 GEMM). `rollout.refresh_from(policy)` copies the trainer's current weights
(any mix of plain / converted layers: the state-dict keys are the same) and re-quantizes them.

With `floor=s > 0` (bf16 only) the copy is a bf16 engine whose kernels are not the trainer's: each
linear's fp32 output moves by `s` × a deterministic draw in [-1/2, 1/2) of its bf16 ulp before its bf16
rounding (fp8rl.fp8.kernel_floor, salted by the layer's position), on the emulated GEMM path (not the
`fast` or CUDA real-bf16 GEMM, whose output is rounded already).

With `kv_cache_fp8=True` every forward with a cache stores keys and values in FP8 (fp8rl.fp8.kv_cache):
a `DynamicCache` passed in (or made by `generate()`) is adopted as an `FP8DynamicCache`, and one is
created when `use_cache` is on and none is given. The copy keeps the policy's class (as a subclass), so
it is called exactly like the policy, `generate()` included.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache

from fp8rl.fp8 import fastgemm
from fp8rl.fp8.convert import DEFAULT_SKIP, swap_linears
from fp8rl.fp8.formats import round_to_bf16
from fp8rl.fp8.kernel_floor import kernel_floor
from fp8rl.fp8.kv_cache import FP8DynamicCache, KVCacheQuantizer
from fp8rl.fp8.linear import QuantizedLinearBase, quantize_operand
from fp8rl.fp8.recipe import OperandSpec, Recipe
from fp8rl.fp8.runtime import FP8Runtime


class RolloutLinear(QuantizedLinearBase):
    """Inference linear: weight quantized at refresh time, activations quantized per call."""

    act_spec: OperandSpec | None  # None: bf16 emulation
    weight_spec: OperandSpec | None
    runtime: FP8Runtime
    real: bool  # `fast` numerics: real bf16 GEMMs (module fp8rl.fp8.fastgemm)
    weight_op: fastgemm.Operand | None
    floor: float  # the kernel floor's scale (bf16 only; 0: the trainer's own bf16 kernels)
    floor_salt: int  # the layer's position: its kernel floor's own draws

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        recipe: Recipe | None,
        *,
        runtime: FP8Runtime | None = None,
        floor: float = 0.0,
        floor_salt: int = 0,
    ) -> RolloutLinear:
        if floor and recipe is not None:
            raise ValueError("floor: the kernel floor models a bf16 engine; give recipe=None with it")
        new = cls._wrap(linear)
        new.runtime = runtime if runtime is not None else FP8Runtime.from_env()
        if recipe is None:
            new.act_spec = new.weight_spec = None
        else:
            new.act_spec = dataclasses.replace(recipe.output.a, delayed=False)
            new.weight_spec = dataclasses.replace(recipe.output.b, delayed=False)
        new.floor, new.floor_salt = float(floor), int(floor_salt)
        new.register_buffer("weight_q", torch.empty(0), persistent=False)
        # `fast` numerics on CPU: real bf16 GEMMs (of the FP8 values, for an FP8 recipe), decided once
        # per layer (fp8rl.fp8.fastgemm); FP8 values only, so not under a noise dose other than 1, and
        # not under a kernel floor (it moves the fp32 output before its rounding)
        new.real = new.real_bf16 and (recipe is None or new.runtime.noise_scale == 1.0) and not new.floor
        new.weight_op = None
        new.requantize()
        return new

    @torch.no_grad()
    def requantize(self) -> None:
        """Re-quantize the weight (after the Parameters changed)."""
        w = self.weight.detach()
        compiled = self.runtime.compiled
        self.weight_q = (
            round_to_bf16(w.float())
            if self.weight_spec is None
            else quantize_operand(
                w, self.weight_spec, compiled=compiled, noise_scale=self.runtime.noise_scale
            )
        )
        if getattr(self, "real", False) and not w.is_cuda:
            self.weight_op = (
                fastgemm.Operand(w.to(torch.bfloat16), None, None)
                if self.weight_spec is None
                else fastgemm.prepare(w, self.weight_spec)
            )

    def quantized_forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight_op is not None:
            x2 = x.reshape(-1, x.shape[-1])
            if fastgemm.rule(torch.bfloat16).use_real(x2.shape[0], x2.shape[1], self.out_features):
                return self._real_forward(x2).to(x.dtype).reshape(*x.shape[:-1], self.out_features)
        compiled = self.runtime.compiled
        xq = (
            round_to_bf16(x.float())
            if self.act_spec is None
            else quantize_operand(x, self.act_spec, compiled=compiled, noise_scale=self.runtime.noise_scale)
        )
        bias = None if self.bias is None else self.bias.float()
        if self.act_spec is None and xq.is_cuda and not self.floor:  # a real bf16 GEMM on CUDA
            y = F.linear(xq.bfloat16(), self.weight_q.bfloat16(), None if bias is None else bias.bfloat16())
            return y.to(x.dtype)
        y = F.linear(xq, self.weight_q, bias)
        if self.floor:
            y = kernel_floor(y, self.floor, self.floor_salt)
        return round_to_bf16(y).to(x.dtype)

    def _real_forward(self, x2: torch.Tensor) -> torch.Tensor:
        """The forward as real bf16 GEMMs (`fast` numerics): bf16 activations times the bf16 weight, or
        the FP8 values of both with the scales applied to the output (fp8rl.fp8.fastgemm.fp8_mm)."""
        w = self.weight_op
        if self.act_spec is None:
            y = x2.to(torch.bfloat16) @ w.values.t()
            return y if self.bias is None else (y.float() + self.bias.float()).to(torch.bfloat16)
        if self.bias is None:
            return fastgemm.fp8_mm(fastgemm.prepare(x2, self.act_spec), w, bf16_out=True)
        return round_to_bf16(fastgemm.fp8_mm(fastgemm.prepare(x2, self.act_spec), w) + self.bias.float())


class RolloutPolicyMixin:
    """Methods the rollout copy adds to the policy's class."""

    rollout_recipe: Recipe | None
    kv_quantizer: KVCacheQuantizer | None

    @torch.no_grad()
    def refresh_from(self, policy: nn.Module) -> None:
        """Copy `policy`'s current weights into this copy and re-quantize them."""
        self.load_state_dict(policy.state_dict(), strict=True)  # type: ignore[attr-defined]
        for mod in self.modules():  # type: ignore[attr-defined]
            if isinstance(mod, RolloutLinear):
                mod.requantize()


_CLASSES: dict[type, type] = {}


def _rollout_class(base: type) -> type:
    """`Rollout<Base>(RolloutPolicyMixin, Base)`, registered in this module so instances pickle."""
    if base not in _CLASSES:
        name = f"Rollout{base.__name__}"
        cls = type(name, (RolloutPolicyMixin, base), {"__module__": __name__, "__qualname__": name})
        globals()[name] = _CLASSES[base] = cls
    return _CLASSES[base]


def _fp8_cache_hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Forward pre-hook: route the KV cache of this call through the FP8 quantizer."""
    quantizer = module.kv_quantizer
    key = "past_key_values" if "past_key_values" in kwargs else "cache"
    cache = kwargs.get(key)
    if isinstance(cache, DynamicCache) and not isinstance(cache, FP8DynamicCache):
        FP8DynamicCache.adopt(cache, quantizer)
    elif cache is None:
        use_cache = kwargs.get("use_cache")
        if use_cache is None:
            use_cache = getattr(getattr(module, "config", None), "use_cache", False)
        if use_cache:
            kwargs[key] = FP8DynamicCache(config=module.config, kv_quantizer=quantizer)
    return args, kwargs


def make_rollout_policy(
    policy: nn.Module,
    recipe: Recipe | None,
    *,
    kv_cache_fp8: bool = False,
    kv_quantizer: KVCacheQuantizer | None = None,
    skip: Iterable[str] = DEFAULT_SKIP,
    runtime: FP8Runtime | None = None,
    floor: float = 0.0,
) -> nn.Module:
    """A frozen FP8 (or, with `recipe=None`, bf16-emulated) copy of `policy` for the sampler, with
    `.refresh_from(policy)` (module docstring); its linears share `runtime` (default: a fresh
    `FP8Runtime.from_env()`) for the compile switch; `floor` > 0 (bf16 only): the kernel floor's scale."""
    if recipe is not None and not isinstance(recipe, Recipe):
        raise ValueError(f"recipe: expected a Recipe or None, got {type(recipe).__name__}")
    if not (isinstance(floor, int | float) and floor >= 0) or (floor and recipe is not None):
        raise ValueError(f"floor: a scale >= 0 of a bf16 rollout copy (recipe=None), got {floor!r}")
    rollout = copy.deepcopy(policy)
    for p in rollout.parameters():
        p.requires_grad_(False)
        p.grad = None
    rt = runtime if runtime is not None else FP8Runtime.from_env()
    position = itertools.count()  # each linear's salt: its position in the model

    def make(lin: nn.Linear) -> RolloutLinear:
        return RolloutLinear.from_linear(lin, recipe, runtime=rt, floor=floor, floor_salt=next(position))

    swap_linears(rollout, make, skip)
    rollout.eval()
    rollout.__class__ = _rollout_class(type(policy))
    rollout.rollout_recipe = recipe
    default_kv = KVCacheQuantizer(noise_scale=rt.noise_scale)
    rollout.kv_quantizer = (kv_quantizer or default_kv) if kv_cache_fp8 else None
    if kv_cache_fp8:
        rollout.register_forward_pre_hook(_fp8_cache_hook, with_kwargs=True)
    return rollout
