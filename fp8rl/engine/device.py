"""Where the reference trainer computes: the CPU (the smoke tier, CI) or one CUDA device.

The device comes from the config (`resources.train.gpus > 0` trains on `cuda`, else on `cpu`), or from
`fp8rl train --device cpu|cuda`. `resolve_device` refuses `cuda` when no CUDA device is visible, before
any work starts. On CUDA the trainer's FP8 linears run real FP8 GEMMs through `torch._scaled_mm` where the
recipe allows (fp8rl.fp8.backend; compute capability ≥ 8.9) and are emulated on the GPU otherwise.

Random draws stay reproducible across devices' generator rules: the trainer's per-step generators live on
the CPU; a sampler running on CUDA draws its tokens from a CUDA generator seeded by one draw of the CPU
one (`generator_on`), so a seed still fixes the rollouts on a given device. CPU runs draw exactly as
before (the same generator object is used).
"""

from __future__ import annotations

import os

import torch

DEVICES = ("cpu", "cuda")


def resolve_device(
    requested: str | None, gpus: int = 0, *, what: str = "resources.train.gpus"
) -> torch.device:
    """`requested` (`cpu` | `cuda`), or when None `cuda` if `gpus > 0` else `cpu`. ValueError naming the
    setting when CUDA is asked for and none is visible, or for an unknown device name."""
    name = requested if requested is not None else ("cuda" if gpus > 0 else "cpu")
    if name not in DEVICES:
        raise ValueError(f"device: unknown {name!r}; allowed: {', '.join(DEVICES)}")
    if name == "cuda":
        if not torch.cuda.is_available():
            source = "--device cuda" if requested is not None else f"{what} is {gpus}"
            raise ValueError(
                f"{source}: the reference trainer would train on CUDA, but no CUDA device is visible "
                "(torch.cuda.is_available() is False); train on the CPU with --device cpu or "
                f"{what}: 0"
            )
        # cuBLAS is deterministic under torch.use_deterministic_algorithms only with a fixed workspace.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    return torch.device(name)


def module_device(model: torch.nn.Module) -> torch.device:
    """The device of `model`'s first parameter (CPU for a model without parameters)."""
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def generator_on(generator: torch.Generator | None, device: torch.device) -> torch.Generator | None:
    """`generator` itself if it lives on `device`'s type, else a generator on `device` seeded by one
    draw from it (deterministic given `generator`'s state)."""
    if generator is None or generator.device.type == device.type:
        return generator
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    return torch.Generator(device=device).manual_seed(seed)


def synchronize(device: torch.device) -> None:
    """Wait for `device`'s queued kernels (a no-op on the CPU), so wall-clock phase times are real."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
