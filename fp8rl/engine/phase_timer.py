"""The per-run phase timer: wall time and tokens per phase, and the run's `throughput.json` content.

Phases: `rollout` (sampling; tokens = generated response tokens), `logprob` (the trainer's recompute of
the old log-probs; tokens = real prompt+response tokens scored), `train` (forward+backward+optimizer of
every update; tokens = real tokens forwarded), `calib` (the BF16 shadow pass and the calibrator; tokens
= real tokens re-scored); a phase the run never ran is absent. Figures are summed from the per-step
`time/*` and `tok/*` metrics of the run, so a resumed run reports every step once. Peak memory is the
process's max RSS (CPU) or the CUDA allocator's peak (a run on CUDA). On CUDA each phase waits for the
device's queued kernels at its start and end, so its wall time is the GPU's. `fp8_gemms` counts the trainer-side FP8 GEMMs of the
process that finished the run by path (`scaled_mm`: real FP8 GEMMs; `emulated`): what really ran, as
the policy's `FP8Runtime` counted them (`prec.runtime.gemms`).
"""

from __future__ import annotations

import resource
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from fp8rl.engine.device import synchronize
from fp8rl.run_records import PHASES, throughput_record


@dataclass
class _Phase:
    tokens: float = 0.0


class PhaseTimer:
    """Accumulates seconds and tokens per phase within the current step; `pop(phase)` returns them and
    resets the phase (None if the phase did not run this step)."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device or torch.device("cpu")
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.tokens = dict.fromkeys(PHASES, 0.0)
        self.entered = dict.fromkeys(PHASES, False)

    @contextmanager
    def phase(self, name: str):
        ph = _Phase()
        self.entered[name] = True
        synchronize(self.device)
        t0 = time.perf_counter()
        try:
            yield ph
        finally:
            synchronize(self.device)
            self.seconds[name] += time.perf_counter() - t0
            self.tokens[name] += ph.tokens

    def pop(self, name: str) -> tuple[float, float] | None:
        out = (self.seconds[name], self.tokens[name]) if self.entered[name] else None
        self.seconds[name], self.tokens[name], self.entered[name] = 0.0, 0.0, False
        return out


def peak_mem_mb(device: torch.device | None = None) -> float:
    if device is not None and device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def throughput_report(rows: list[dict], prec) -> dict:
    """The `throughput.json` content (fp8rl.run_records.throughput_record) from the run's metrics rows and
    its precision set-up, with this process's peak memory, thread count, FP8 GEMM counts, and `gemms`:
    how the policy's, the rollout copy's and the shadow pass's linear GEMMs ran (real or emulated)."""
    record = throughput_record(
        rows,
        emulated=prec.emulated,
        device=torch.cuda.get_device_name(prec.device) if prec.device.type == "cuda" else "cpu",
        fp8_backend=prec.backend,
        peak_mem_mb=peak_mem_mb(prec.device),
        threads=torch.get_num_threads(),
        fp8_gemms=prec.runtime.gemms.counts() if prec.fp8 else None,
    )
    record["gemms"] = dict(prec.gemms)
    return record
