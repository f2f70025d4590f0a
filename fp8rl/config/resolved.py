"""One run's settings, resolved once: `resolve_run(cfg, spec)` applies the run's matrix cell to the
experiment config and returns a frozen `ResolvedRun` that every consumer reads (the trainer, the
precision setup, the verl adapter, `fp8rl train`, the Snakefile, the report) instead of re-deriving
its settings from (config, run spec).

What it holds: the cell (`spec`) and its variant's switches (`variant`), the algorithm's options
(`algo`), the model entry, the FP8 settings with the run's condition applied and validated (`fp8`: the
tier's `fp8` section for runs outside a condition), the fixed PPO clip interval (`bounds`), the
calibration options (`calib`: the tier's section, with the run's condition's `calib` overrides for a
calibrated variant) and the mismatch-correction options, the bf16 run a `calib.reference: run` cell reads its
targets from (`reference`, None otherwise), the noise dose its FP8 operands carry (1 for non-FP8
variants), a `bf16_floor` run's rollout floor (`floor`, None otherwise), the trainer-vs-rollout KL a
run's noise is searched for (`target_kl`: `fp8.target_kl` or `floor.target_kl`) and the digest of
everything its training depends on (`train_digest`: the checkpoint and DAG key).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from fp8rl.config.algorithms import DAPOConfig, GRPOConfig
from fp8rl.config.models import ModelConfig
from fp8rl.config.precision import CalibConfig, FloorConfig, FP8Config, TISConfig
from fp8rl.config.runs import RunSpec, reference_run
from fp8rl.vocabulary import VariantSpec

if TYPE_CHECKING:
    from fp8rl.config.experiment import ExperimentConfig
    from fp8rl.rl.bounds import ClipBounds


@dataclass(frozen=True)
class ResolvedRun:
    """The settings of one run of the matrix (module docstring); build it with `resolve_run`."""

    spec: RunSpec
    variant: VariantSpec
    algo: GRPOConfig | DAPOConfig
    model: ModelConfig
    fp8: FP8Config
    calib: CalibConfig
    tis: TISConfig
    reference: RunSpec | None
    cfg: ExperimentConfig = field(repr=False, compare=False)  # for the digest, made on first use
    floor: FloorConfig | None = None  # a `bf16_floor` run's rollout floor

    @cached_property
    def train_digest(self) -> str:
        """The digest of everything the run's training depends on (`TRAIN_SECTIONS`, its model, its
        condition's FP8 settings and, for a calibrated run, its condition's calib overrides): the checkpoint's resume key and the DAG's rerun key."""
        from fp8rl.config.experiment import TRAIN_SECTIONS

        return self.cfg.section_digest(
            *TRAIN_SECTIONS, model=self.spec.model, condition=self.spec.condition, variant=self.spec.variant
        )

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    def with_noise_scale(self, scale: float) -> ResolvedRun:
        """The same run with its FP8 operands at noise scale `scale`, or, for a `bf16_floor` run, its
        rollout floor at scale `scale` (the scale a `target_kl` search found); the train digest stays the
        config's, which names the target."""
        if self.floor is not None:
            return dataclasses.replace(self, floor=self.floor.model_copy(update={"scale": float(scale)}))
        fp8 = self.fp8.model_copy(update={"noise_scale": float(scale)})
        return dataclasses.replace(self, fp8=fp8)

    @property
    def target_kl(self) -> float | None:
        """The trainer-vs-rollout KL the run's noise scale is searched for before its first step:
        `fp8.target_kl` of an FP8 run, `floor.target_kl` of a `bf16_floor` run; None: no search."""
        if self.variant.fp8:
            return self.fp8.target_kl
        return None if self.floor is None else self.floor.target_kl

    @property
    def floor_scale(self) -> float:
        """The rollout floor's scale (fp8rl.fp8.kernel_floor): the fixed or found `floor.scale` of a
        `bf16_floor` run; 0 (no floor) for every other run and before a search."""
        return 0.0 if self.floor is None or self.floor.scale is None else self.floor.scale

    @property
    def mismatch_scale(self) -> float:
        """The scale of the run's modelled mismatch, endpoints.csv's `noise`: the rollout floor's scale
        of a `bf16_floor` run, the FP8 dose otherwise (1 outside FP8 variants)."""
        return self.floor_scale if self.floor is not None else self.noise_scale

    @cached_property
    def bounds(self) -> ClipBounds:
        """PPO's fixed interval (1 - clip_low, 1 + clip_high) of the run's algorithm (made on first use:
        `fp8rl.rl` imports torch, which reading a config does not need)."""
        from fp8rl.rl.bounds import ClipBounds

        return ClipBounds.fixed(self.algo.clip_low, self.algo.clip_high)

    @property
    def needs_reference(self) -> bool:
        """Whether the run reads per-step targets from a finished bf16 run (`calib.reference: run`)."""
        return self.reference is not None

    @property
    def noise_scale(self) -> float:
        """The dose s of the trainer's FP8 operands (x + s (Q(x) - x)); 1 outside FP8 variants."""
        return self.fp8.noise_scale if self.variant.fp8 else 1.0

    @property
    def rollout_noise_scale(self) -> float:
        """The dose of the rollout copy's FP8 operands (`fp8.rollout_noise_scale`, else the trainer's)."""
        return self.fp8.rollout_dose if self.variant.fp8 else 1.0

    @property
    def ratio_noise(self) -> float:
        """The synthetic ratio-noise level (`fp8.ratio_noise`); FP8 variants only, else 0."""
        return self.fp8.ratio_noise if self.variant.fp8 else 0.0


def resolve_run(cfg: ExperimentConfig, spec: RunSpec | ResolvedRun) -> ResolvedRun:
    """`spec`'s settings under `cfg` (a `ResolvedRun` is returned as it is). Raises KeyError for a model
    or condition the config does not define."""
    if isinstance(spec, ResolvedRun):
        return spec
    algo = cfg.algorithm(spec.algo)
    variant = spec.spec
    calib = cfg.calib_for(spec.condition) if variant.calib else cfg.calib
    needs_reference = variant.calib and calib.reference.mode == "run"
    return ResolvedRun(
        spec=spec,
        variant=variant,
        algo=algo,
        model=cfg.model(spec.model),
        fp8=cfg.fp8_for(spec.condition),
        calib=calib,
        tis=cfg.tis,
        reference=reference_run(spec) if needs_reference else None,
        cfg=cfg,
        floor=cfg.floor_for(spec.variant),
    )
