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


def is_fp8_hardware(device: torch.device | str | None = None) -> bool:
    """True when `device` (default: the current CUDA device, if any) is a CUDA device with native FP8
    tensor cores (compute capability ≥ 8.9); False for the CPU."""
    if device is not None and torch.device(device).type != "cuda":
        return False
    if not torch.cuda.is_available():
        return False
    major, minor = torch.cuda.get_device_capability(device)
    return (major, minor) >= (8, 9)


def gemm_backend(device: torch.device | str | None = None) -> str:
    """The GEMM path FP8 linears on `device` take for recipes `_scaled_mm` computes exactly:
    `FP8RL_FP8_BACKEND` if set (emulated | scaled_mm), else `scaled_mm` on FP8 hardware and `emulated`
    elsewhere (the CPU included, even on a machine that also has an FP8 GPU)."""
    forced = os.environ.get("FP8RL_FP8_BACKEND")
    if forced:
        if forced not in BACKENDS:
            raise ValueError(f"FP8RL_FP8_BACKEND: unknown backend {forced!r}; allowed: {', '.join(BACKENDS)}")
        return forced
    return "scaled_mm" if is_fp8_hardware(device) else "emulated"


GEMM_COUNTS = dict.fromkeys(BACKENDS, 0)


def count_gemm(path: str) -> None:
    """Record that one FP8 GEMM ran on `path` (`scaled_mm` or `emulated`): a recipe `_scaled_mm` computes
    can still fall back to emulation for one GEMM (cuBLASLt needs dims that are multiples of 16), and the
    throughput report says how many did."""
    GEMM_COUNTS[path] += 1


def gemm_counts(reset: bool = False) -> dict[str, int]:
    """FP8 GEMMs run per path in this process since the last reset."""
    out = dict(GEMM_COUNTS)
    if reset:
        for k in GEMM_COUNTS:
            GEMM_COUNTS[k] = 0
    return out
