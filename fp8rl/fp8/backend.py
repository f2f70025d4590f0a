"""Which GEMM path FP8 linears take on this machine: per layer (`gemm_backend`) and per GEMM (`gemm_path`).

- `scaled_mm`: real FP8 GEMMs through `torch._scaled_mm` (tensorwise / rowwise scales), the default on an
  FP8-capable CUDA device (compute capability ≥ 8.9: Ada, Hopper, Blackwell).
- `emulated`: operands fake-quantized (rounded to FP8 with their scales) and multiplied in fp32
  (docs/architecture.md#emulation-on-cpu): the default on CPU and for blockwise/MX recipes, which `_scaled_mm` cannot compute.
  `torch._scaled_mm` also runs on CPU, but measured ~1.8x slower than the fp32 GEMM of the emulation
  there (benchmarks/fp8_quant.py), so CPU uses it only when asked (`FP8RL_FP8_BACKEND=scaled_mm`).
(`transformer_engine`, the verl path's GEMMs, is reported by the verl adapter, not here: the reference
trainer's linears never call Transformer Engine.)
"""

from __future__ import annotations

import os

import torch

from fp8rl.fp8.recipe import GemmSpec
from fp8rl.fp8.tiling import Granularity
from fp8rl.vocabulary import FP8_BACKEND_ENV

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
    forced = os.environ.get(FP8_BACKEND_ENV)
    if forced:
        if forced not in BACKENDS:
            raise ValueError(f"{FP8_BACKEND_ENV}: unknown backend {forced!r}; allowed: {', '.join(BACKENDS)}")
        return forced
    return "scaled_mm" if is_fp8_hardware(device) else "emulated"


def scaled_mm_computes(spec: GemmSpec, device: torch.device | str) -> bool:
    """True when `torch._scaled_mm` on `device` computes the GEMM `spec` exactly: tensorwise or rowwise
    scales on both operands, not both e5m2, and on CUDA no rowwise scales with an e5m2 operand (cuBLASLt's
    rowwise-scaled FP8 GEMM takes e4m3 only)."""
    a, b = spec.a, spec.b
    if a.tiling.tiled or b.tiling.tiled:
        return False
    if a.fmt == "e5m2" and b.fmt == "e5m2":
        return False
    rowwise = Granularity.ROWWISE in (a.tiling.granularity, b.tiling.granularity)
    return not (torch.device(device).type == "cuda" and rowwise and "e5m2" in (a.fmt, b.fmt))


def gemm_path(spec: GemmSpec, backend: str, device: torch.device | str) -> str:
    """The path one GEMM of a layer whose backend is `backend` takes on `device`: `scaled_mm` where that
    backend is `scaled_mm` and `_scaled_mm` computes `spec` exactly, `emulated` otherwise."""
    return "scaled_mm" if backend == "scaled_mm" and scaled_mm_computes(spec, device) else "emulated"
