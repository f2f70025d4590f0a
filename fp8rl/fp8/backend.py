"""Which GEMM path FP8 linears take on this machine, for the linears and the throughput report.

- `scaled_mm`: real FP8 GEMMs through `torch._scaled_mm` (tensorwise / rowwise scales), the default on an
  FP8-capable CUDA device (compute capability ≥ 8.9: Ada, Hopper, Blackwell).
- `emulated`: operands fake-quantized (rounded to FP8 with their scales) and multiplied in fp32
  (DESIGN.md §8): the default on CPU and for blockwise/MX recipes, which `_scaled_mm` cannot compute.
  `torch._scaled_mm` also runs on CPU, but measured ~1.8x slower than the fp32 GEMM of the emulation
  there (benchmarks/fp8_quant.py), so CPU uses it only when asked (`FP8RL_FP8_BACKEND=scaled_mm`).
(`transformer_engine`, the verl path's GEMMs, is reported by the verl adapter, not here: the reference
trainer's linears never call Transformer Engine.)
"""

from __future__ import annotations

import os

import torch

BACKENDS = ("emulated", "scaled_mm")


def is_fp8_hardware() -> bool:
    """True on a CUDA device with native FP8 tensor cores (compute capability ≥ 8.9)."""
    if not torch.cuda.is_available():
        return False
    major, minor = torch.cuda.get_device_capability()
    return (major, minor) >= (8, 9)


def gemm_backend() -> str:
    """The GEMM path FP8 linears take for recipes `_scaled_mm` computes exactly: `FP8RL_FP8_BACKEND`
    if set (emulated | scaled_mm), else `scaled_mm` on FP8 hardware and `emulated` elsewhere."""
    forced = os.environ.get("FP8RL_FP8_BACKEND")
    if forced:
        if forced not in BACKENDS:
            raise ValueError(f"FP8RL_FP8_BACKEND: unknown backend {forced!r}; allowed: {', '.join(BACKENDS)}")
        return forced
    return "scaled_mm" if is_fp8_hardware() else "emulated"


def fp8_backend() -> str:
    """What the throughput report states for fp8rl's own FP8 linears: `scaled_mm` or `emulated`."""
    return gemm_backend()
