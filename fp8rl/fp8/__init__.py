"""FP8 numerics (docs/architecture.md#fp8-numerics-contract): formats, scaled quantization, recipes, FP8 linear, FP8 optimizer state,
rollout quantization. Never imports `fp8rl.rl`. The mutable state of converted layers (compile switch,
GEMM counts) lives in the `FP8Runtime` their owner passes to `convert_to_fp8`, not in module globals.

`make_rollout_policy`, `KVCacheQuantizer`, `FP8DynamicCache` and `RolloutLinear` import `transformers`,
so they are loaded on first access (a few seconds), not with the package.

In `reproducible` numerics every CPU matrix product runs on the pinned OpenBLAS kernel from here on
(`fp8rl.numerics.pin_gemms`)."""

from fp8rl import numerics as _numerics
from fp8rl.fp8 import recipes as _recipes  # noqa: F401  (registers every recipe, one module each)
from fp8rl.fp8.backend import gemm_backend, is_fp8_hardware
from fp8rl.fp8.convert import (
    convert_to_bf16_emulation,
    convert_to_fp8,
    fp8_state_dict,
    load_fp8_state_dict,
    quantization_disabled,
    quantized_linears,
)
from fp8rl.fp8.formats import E4M3, E5M2, FP8Format, get_format, round_to_bf16, saturating_cast
from fp8rl.fp8.linear import BF16Linear, FP8Linear
from fp8rl.fp8.optim import BlockwiseFP8AdamW, build_adamw
from fp8rl.fp8.quantize import dequantize, fake_quantize, quantize
from fp8rl.fp8.recipe import RECIPES, GemmSpec, OperandSpec, Recipe, get_recipe
from fp8rl.fp8.runtime import FP8Runtime, GemmCounter
from fp8rl.fp8.scaling import AmaxHistory
from fp8rl.fp8.tiling import TILE_GRANULARITIES, Granularity, Tiling

_numerics.pin_gemms()

__all__ = [
    "E4M3",
    "E5M2",
    "TILE_GRANULARITIES",
    "RECIPES",
    "AmaxHistory",
    "BF16Linear",
    "BlockwiseFP8AdamW",
    "FP8DynamicCache",
    "KVCacheQuantizer",
    "RolloutLinear",
    "FP8Format",
    "FP8Linear",
    "FP8Runtime",
    "GemmCounter",
    "Granularity",
    "GemmSpec",
    "OperandSpec",
    "Recipe",
    "Tiling",
    "build_adamw",
    "convert_to_bf16_emulation",
    "convert_to_fp8",
    "dequantize",
    "fake_quantize",
    "fp8_state_dict",
    "gemm_backend",
    "get_format",
    "get_recipe",
    "is_fp8_hardware",
    "load_fp8_state_dict",
    "make_rollout_policy",
    "quantization_disabled",
    "quantize",
    "quantized_linears",
    "round_to_bf16",
    "saturating_cast",
]

_LAZY = {
    "make_rollout_policy": "fp8rl.fp8.rollout_copy",
    "RolloutLinear": "fp8rl.fp8.rollout_copy",
    "KVCacheQuantizer": "fp8rl.fp8.kv_cache",
    "FP8DynamicCache": "fp8rl.fp8.kv_cache",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fp8rl.fp8' has no attribute {name!r}")
