"""The mutable state of a model's FP8 linears, in one object its owner (the trainer) holds.

`FP8Runtime` carries what used to be process-wide: whether fake quantization runs as one
`torch.compile`d kernel (`compiled`), how many FP8 GEMMs ran on each path (`gemms`, read by the
throughput report), and the FP8 noise dose of the study tiers (`noise_scale`). `convert_to_fp8(..., runtime=)` and `make_rollout_policy(..., runtime=)` hand it to
every layer they make, so two models converted with two runtimes keep separate counts; a model
converted without one gets its own `FP8Runtime.from_env()`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from fp8rl.fp8.backend import BACKENDS

# `bf16`: a real bf16 GEMM of the FP8 values, scales applied to its output (`fast` numerics on CPU,
# fp8rl.fp8.fastgemm)
PATHS = (*BACKENDS, "bf16")


class GemmCounter:
    """FP8 GEMMs run per path (`scaled_mm`: real FP8 GEMMs; `emulated`; `bf16`: the `fast` numerics
    mode's bf16 GEMMs of FP8 values). A recipe `_scaled_mm` computes can still emulate one GEMM (e.g.
    e5m2 × e5m2), and the throughput report says how many did."""

    def __init__(self) -> None:
        self._counts = dict.fromkeys(PATHS, 0)

    def add(self, path: str) -> None:
        """Record that one FP8 GEMM ran on `path`."""
        if path not in self._counts:
            raise ValueError(f"path: unknown GEMM path {path!r}; allowed: {', '.join(PATHS)}")
        self._counts[path] += 1

    def counts(self) -> dict[str, int]:
        """GEMMs per path since this counter was made or last reset (`bf16` only once one ran: the
        pinned path's record is what it always was)."""
        return {k: v for k, v in self._counts.items() if k in BACKENDS or v}

    def reset(self) -> None:
        self._counts = dict.fromkeys(PATHS, 0)


@dataclass(frozen=True)
class FP8Runtime:
    """Switches and counters shared by the FP8 linears of one model (module docstring).

    `compiled`: fuse fake quantization into one `torch.compile`d kernel (inductor, C++ on CPU; same
    values), for a compile of a few seconds per process and shape. Off by default: the smoke tier's
    tensors are small and its runs short."""

    compiled: bool = False
    gemms: GemmCounter = field(default_factory=GemmCounter)
    # The FP8 noise dose s: every operand these layers quantize becomes x + s * (Q(x) - x)
    # (fp8rl.fp8.quantize.amplify_error); s != 1 forces the emulated GEMM path.
    noise_scale: float = 1.0

    def __post_init__(self):
        if not (math.isfinite(self.noise_scale) and self.noise_scale >= 0.0):
            raise ValueError(f"FP8 noise dose must be finite and >= 0, got {self.noise_scale}")

    @classmethod
    def from_env(cls, noise_scale: float = 1.0) -> FP8Runtime:
        """A fresh runtime with dose `noise_scale`, `compiled` when the environment sets
        `FP8RL_FP8_COMPILE=1`."""
        return cls(compiled=os.environ.get("FP8RL_FP8_COMPILE", "0") == "1", noise_scale=float(noise_scale))
