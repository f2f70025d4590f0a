"""FP8 numerics (DESIGN.md §4): formats, scaled quantization, recipes, FP8 linear, FP8 optimizer state,
rollout quantization. Never imports `fp8rl.rl`."""

from fp8rl.fp8.formats import E4M3, E5M2, FP8Format, get_format, round_to_bf16, saturating_cast
from fp8rl.fp8.quantize import GRANULARITIES, dequantize, fake_quantize, quantize

__all__ = [
    "E4M3",
    "E5M2",
    "FP8Format",
    "GRANULARITIES",
    "dequantize",
    "fake_quantize",
    "get_format",
    "quantize",
    "round_to_bf16",
    "saturating_cast",
]
