"""Where the run's variant meets `fp8rl.fp8`: the policy, the rollout copy and the optimizer in the
variant's precision.

- `bf16`: the policy's transformer linears compute bf16 GEMMs: real ones on CUDA, emulated on the CPU
  (operands rounded to bf16, fp32 compute); the rollout copy likewise; AdamW with fp32 moments. Master
  weights stay fp32.
- `bf16_floor`: `bf16` whose rollout copy computes with other bf16 kernels than the trainer: each of its
  GEMM outputs moves by the run's floor scale × a deterministic draw of its bf16 ulp before rounding
  (fp8rl.fp8.kernel_floor; the scale fixed or found by a target-KL search, `run.floor_scale`).
- `fp8*`: the linears run the run's FP8 recipe (granularity, `fp8.format`) in the forward and both
  backward GEMMs (`fp8.gemms`), the rollout copy quantizes weights and activations per recipe
  (`fp8.rollout`, optional FP8 KV cache `fp8.kv_cache`), and AdamW keeps its moments in FP8
  (`fp8.optimizer_state`, implementation `fp8.optimizer`). `fp8.noise_scale` s scales the quantization
  error of every one of those operands (x + s * (Q(x) - x)), the dose knob of the study tiers.
- `fp16`: the linears and the rollout copy emulate FP16 GEMMs (fp8rl.fp8.fp16), AdamW with fp32 moments;
  the trainer scales the loss dynamically (fp8rl.engine.loss_scale).
Embeddings and `lm_head` stay high precision (as torchao and Transformer Engine recipes do).
`as_bf16()` switches the policy's FP8 quantization off: inside it the linears compute the bf16-emulated
GEMMs of the bf16 variant (what the BF16 shadow pass scores with). `runtime` is the FP8 layers' state (compile switch, GEMM
counts per path) that the trainer owns through its `Precision`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from fp8rl.config import ExperimentConfig, ResolvedRun, RunSpec, resolve_run
from fp8rl.engine.device import module_device

if TYPE_CHECKING:
    from fp8rl.fp8 import FP8Runtime

SKIP = ("embed_tokens", "lm_head")


def bf16_emulation(model: torch.nn.Module) -> str:
    """Swap the transformer linears of `model` for bf16-emulating ones, in place; returns the precision
    name recorded in provenance."""
    from fp8rl.fp8 import convert_to_bf16_emulation

    convert_to_bf16_emulation(model, skip=SKIP)
    return "bf16-emulated"


@dataclass
class Precision:
    """The variant's policy (converted in place), rollout copy, optimizer and switches."""

    policy: torch.nn.Module
    rollout: torch.nn.Module
    optimizer: torch.optim.Optimizer
    recipe: object | None
    fp8: bool
    backend: str
    emulated: bool
    gemms: dict[str, str]  # how each model's linear GEMMs ran, for throughput.json
    as_bf16: Callable[[], AbstractContextManager]
    device: torch.device
    runtime: FP8Runtime

    def refresh_rollout(self) -> None:
        """Copy the trainer's current weights into the rollout copy (once per rollout batch)."""
        self.rollout.refresh_from(self.policy)


def rollout_runtime(runtime: FP8Runtime, run: ResolvedRun) -> FP8Runtime:
    """The runtime of the rollout copy: the trainer's own (shared GEMM counts and compile switch), with
    its own noise dose when `fp8.rollout_noise_scale` splits the dose by path (the attribution tier)."""
    if run.rollout_noise_scale == runtime.noise_scale:
        return runtime
    return dataclasses.replace(runtime, noise_scale=run.rollout_noise_scale)


def setup_precision(model: torch.nn.Module, cfg: ExperimentConfig, run: RunSpec | ResolvedRun) -> Precision:
    """Convert `model` (already on its device) for `run`'s variant and build its rollout copy and
    optimizer; FP8 linears pick their GEMM path for that device."""
    from fp8rl import fp8

    run = resolve_run(cfg, run)
    spec, f = run.variant, run.fp8
    recipe = None
    if spec.fp8:
        recipe = fp8.get_recipe(
            run.spec.granularity,
            f.format,
            amax_history_len=f.amax_history_len,
            amax_compute_algo=f.amax_compute_algo,
        )
    runtime = fp8.FP8Runtime.from_env(noise_scale=run.noise_scale)
    if spec.fp8 and f.gemms:
        fp8.convert_to_fp8(model, recipe, skip=SKIP, runtime=runtime)
    elif spec.fp16:
        from fp8rl.fp8.fp16 import convert_to_fp16_emulation

        convert_to_fp16_emulation(model, skip=SKIP)
    else:
        fp8.convert_to_bf16_emulation(model, skip=SKIP)
    rollout_recipe = recipe if (spec.fp8 and f.rollout) else None
    if spec.fp16:
        from fp8rl.fp8.fp16 import make_fp16_rollout_policy

        rollout = make_fp16_rollout_policy(model, skip=SKIP, runtime=runtime)
    else:
        rollout = fp8.make_rollout_policy(
            model,
            rollout_recipe,
            kv_cache_fp8=bool(spec.fp8 and f.kv_cache),
            runtime=rollout_runtime(runtime, run),
            floor=run.floor_scale,
        )
    s = cfg.schedule
    optimizer = fp8.build_adamw(
        [p for p in model.parameters() if p.requires_grad],
        lr=s.lr,
        weight_decay=s.weight_decay,
        betas=(0.9, 0.999),
        eps=1e-8,
        fp8_state=bool(spec.fp8 and f.optimizer_state),
        impl=f.optimizer,
        noise_scale=runtime.noise_scale,
    )
    device = module_device(model)
    backend = fp8.gemm_backend(device) if spec.fp8 else "none"
    # bf16 GEMMs are real on CUDA (BF16Linear); FP8 is real only through `_scaled_mm` on FP8 hardware for
    # a recipe it computes exactly (blockwise and MX are emulated on the GPU too), and at noise dose 1.
    cuda = device.type == "cuda"
    exact = recipe is not None and recipe.scaled_mm_exact and runtime.noise_scale == 1
    real_fp8 = bool(spec.fp8 and f.gemms and backend == "scaled_mm" and exact)
    bf16_path = "bf16 (cuda)" if cuda else "bf16-emulated"
    fp8_path = f"fp8 {run.spec.granularity} " + ("(_scaled_mm)" if real_fp8 else "emulated")
    emulated = not (real_fp8 or (not spec.fp8 and not spec.fp16 and cuda))
    if spec.fp16:
        bf16_path = "fp16-emulated"
    elif not cuda and fp8.fastgemm.enabled():  # `fast` numerics: real bf16 GEMMs where faster
        bf16_path = "bf16 (cpu, real where faster)"
        fp8_path = fp8_path if real_fp8 or runtime.noise_scale != 1 else fp8_path + " (bf16 GEMM)"
    # a kernel floor computes the emulated GEMM whatever the device (its output moves before rounding)
    rollout_bf16 = f"bf16-emulated, kernel floor {run.floor_scale:.4g}" if run.floor_scale else bf16_path
    gemms = {
        "policy": fp8_path if (spec.fp8 and f.gemms) else bf16_path,
        # the FP8 rollout copy quantizes weights and activations per recipe, then computes in fp32
        "rollout": f"fp8 {run.spec.granularity} emulated" if rollout_recipe is not None else rollout_bf16,
        "shadow": bf16_path,
        "embeddings_lm_head": "fp32",
    }

    def as_bf16() -> AbstractContextManager:
        return fp8.quantization_disabled(model, as_bf16=True)

    return Precision(
        model, rollout, optimizer, recipe, spec.fp8, backend, emulated, gemms, as_bf16, device, runtime
    )
