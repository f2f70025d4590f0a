"""What the FP8 variants change: what runs in FP8 and how it is scaled (`fp8`), truncated importance
sampling (`tis`) and calibrated clipping (`calib`); and the `bf16_floor` arm's rollout (`floor`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from fp8rl.config.base import CalibReferenceField, Strict
from fp8rl.vocabulary import (
    AMAX_ALGOS,
    CALIB_POPULATIONS,
    CALIB_UPPER_MODES,
    FP8_OPTIMIZERS,
    REAL_BF16_KL,
    RECIPE_FORMATS,
    TIS_LEVELS,
    CalibReference,
)

# The range of a searched noise scale: `fp8.noise_scale`'s and the kernel floor's (fp8rl.engine.noise_target)
MIN_NOISE_SCALE, MAX_NOISE_SCALE = 1 / 64, 64.0


class FP8Config(Strict):
    """What the fp8* variants put in FP8 (all of it by default: 'fully FP8')."""

    OMIT_AT_DEFAULT = ("rollout_noise_scale", "ratio_noise", "target_kl")

    gemms: bool = Field(
        True, description="the policy's linears run their forward and both backward GEMMs in FP8 (the recipe)"
    )
    optimizer_state: bool = Field(
        True, description="AdamW keeps its moments in FP8 (implementation: `optimizer`; verl: bf16 moments)"
    )
    rollout: bool = Field(
        True, description="the rollout copy quantizes its weights and activations to FP8 (verl: vLLM's fp8)"
    )
    kv_cache: bool = Field(
        True, description="the rollout copy keeps its KV cache in FP8, as an FP8 rollout engine does"
    )
    format: Literal[RECIPE_FORMATS] = Field(
        "hybrid", description="tensorwise/delayed operand formats; blockwise and mxfp8 are always e4m3"
    )
    amax_history_len: int = Field(16, gt=0, description="delayed scaling history length")
    amax_compute_algo: Literal[AMAX_ALGOS] = Field(
        "max", description="delayed scaling: the scale's amax is the history's max or its most recent entry"
    )
    noise_scale: float = Field(
        1.0,
        gt=0.0,
        le=64.0,
        description=(
            "dose of FP8 noise: every quantized operand (GEMM operands, optimizer moments, rollout weights, "
            "activations and KV cache) becomes x + s * (Q(x) - x); 1 is plain FP8. s != 1 is emulated"
        ),
    )
    optimizer: Literal[FP8_OPTIMIZERS] = Field(
        "blockwise",
        description=(
            "FP8-moment AdamW: 'blockwise' (fp8rl's 1x128 e4m3 tiles, sqrt(v) stored; no compile) or "
            "'torchao' (torchao.optim.AdamWFp8; compiles its step, ~1 min per process on CPU)"
        ),
    )
    # The attribution tier's knobs (docs/attribution.md). Both are left out of the dump at their defaults
    # (`OMIT_AT_DEFAULT`), so the digests of configs written before them stay as they were.
    rollout_noise_scale: float | None = Field(
        None,
        gt=0.0,
        le=64.0,
        description=(
            "the dose of the rollout copy alone (its weights, activations and KV cache); None: noise_scale. "
            "With it, noise_scale is the trainer's dose (GEMMs, optimizer moments): the dose split by path"
        ),
    )
    ratio_noise: float = Field(
        0.0,
        ge=0.0,
        le=4.0,
        description=(
            "synthetic phantom clipping: seeded noise on the PPO ratio's log-probs only (the loss's ratio, "
            "clip decisions and calibration see it; the GEMMs, gradient path and shadow pass do not): "
            "the logit-error level of `fp8rl study ratio-noise`, per token sqrt(2) * level * (1 - p_old) * z"
        ),
    )

    target_kl: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description=(
            "the noise set by its effect: the per-token KL (k3) between the trainer and the rollout on "
            "held-out prompts at the base that the run's noise scale is searched for before its first step "
            "(fp8rl.engine.noise_target; real stacks: about 1e-3 to 3e-3); None: noise_scale as given"
        ),
    )

    @model_validator(mode="after")
    def _target_sets_the_scale(self) -> FP8Config:
        if self.target_kl is not None and (self.noise_scale != 1.0 or self.rollout_noise_scale is not None):
            raise ValueError(
                "target_kl sets the noise scale itself: leave noise_scale (1) and rollout_noise_scale unset"
            )
        return self

    @model_validator(mode="after")
    def _noise_needs_blockwise_optimizer(self) -> FP8Config:
        noisy = self.noise_scale != 1.0 or self.target_kl is not None
        if noisy and self.optimizer_state and self.optimizer == "torchao":
            raise ValueError(
                "noise_scale != 1 needs optimizer: 'blockwise' (torchao's AdamWFp8 has no noise dose)"
            )
        return self

    @property
    def rollout_dose(self) -> float:
        """The noise dose of the rollout copy: `rollout_noise_scale`, else `noise_scale`."""
        return self.noise_scale if self.rollout_noise_scale is None else self.rollout_noise_scale


class TISConfig(Strict):
    """The mismatch corrections' options (fp8rl.rl.corrections): the truncation cap of the `*_tis`,
    `*_seqtis` and `*_mis` variants, and the bands of `*_icepop` and `*_mis`."""

    OMIT_AT_DEFAULT = ("mis", "icepop_mask_frac")

    cap: float = Field(
        2.0, gt=0.0, description="truncation cap C: importance weight min(pi_old / pi_rollout, C)"
    )
    level: Literal[TIS_LEVELS] = Field("token", description="*_tis variants: token or sequence (= *_seqtis)")
    icepop: tuple[float, float] | None = Field(
        None,
        description="*_icepop variants: keep the ratio inside [low, high], zero it outside (None: [0.5, 5])",
    )
    mis: tuple[float, float] | None = Field(
        None,
        description="*_mis variants: drop sequences whose geometric-mean ratio leaves [low, high] "
        "(None: [0.97, 1.03]; long responses want a narrower band, e.g. [0.999, 1.001])",
    )
    icepop_mask_frac: float | None = Field(
        None,
        ge=0.0,
        lt=1.0,
        description="*_icepop_adaptive variants: the largest fraction of a step's tokens the band may mask, "
        "half on each side (None: 0.02)",
    )

    @field_validator("icepop", "mis")
    @classmethod
    def _band(cls, v: tuple[float, float] | None, info) -> tuple[float, float] | None:
        if v is not None and not 0.0 <= v[0] < v[1]:
            raise ValueError(f"{info.field_name} must be [low, high] with 0 <= low < high, got {list(v)}")
        if v is not None and info.field_name == "mis" and v[0] == 0.0:
            raise ValueError(f"mis must be [low, high] with 0 < low < high, got {list(v)}")
        return v


class CalibConfig(Strict):
    """Calibrated clipping options (docs/architecture.md#calibrated-clipping)."""

    OMIT_AT_DEFAULT = ("every",)

    reference: CalibReferenceField = Field(
        CalibReference("shadow"), description="'shadow', 'run' or 'static:<q>'"
    )
    population: Literal[CALIB_POPULATIONS] = Field(
        "neg", description="tokens that set the target and the lower quantile: A<0 ones ('neg') or all"
    )
    upper: Literal[CALIB_UPPER_MODES] = Field(
        "proportional",
        description="the upper bound: proportional (U = 1 + clip_high * (1 - L) / clip_low), quantile "
        "(the reference's upper-tail fraction) or fixed (U = 1 + clip_high)",
    )
    low_range: tuple[float, float] = Field(
        (0.5, 1.0), description="[low, high] the calibrated lower bound L is clamped to"
    )
    # 0 (the default): each update's target comes from its own shadow tokens, so it tracks the reference
    # without lag. > 0 pools the counts as an EMA over ~1/(1-m) updates: more tokens per target, but it
    # lags a clip fraction that moves over the run (fp8rl.rl.calibration, step 4).
    momentum: float = Field(
        0.0, ge=0.0, lt=1.0, description="EMA of the shadow reference counts over updates; 0 = none (no lag)"
    )
    run_window: int = Field(
        1, ge=1, description="reference 'run': centred moving mean of the bf16 run's per-step targets (odd)"
    )
    sample_frac: float = Field(
        0.25, gt=0.0, le=1.0, description="fraction of sequences re-scored by the shadow pass (1: all)"
    )
    every: int | None = Field(
        None,
        ge=1,
        description="recalibration cadence: bounds set at steps where (step - 1) % every == 0 and held "
        "between (no per-update shadow pass on the steps between); None: every update (the default)",
    )

    @field_validator("low_range")
    @classmethod
    def _low_range(cls, v: tuple[float, float]) -> tuple[float, float]:
        lo, hi = v
        if not 0.0 < lo <= hi <= 1.0:
            raise ValueError(f"low_range must satisfy 0 < low <= high <= 1, got {list(v)}")
        return v

    @field_validator("run_window")
    @classmethod
    def _odd_window(cls, v: int) -> int:
        if v % 2 == 0:
            raise ValueError(f"run_window must be odd (a centred window), got {v}")
        return v

    @model_validator(mode="after")
    def _static_has_no_upper_quantile(self) -> CalibConfig:
        if self.reference.mode == "static" and self.upper == "quantile":
            raise ValueError(
                "upper: 'quantile' needs a reference for the upper tail; a 'static:<q>' reference gives "
                "only the lower quantile, so use upper: 'proportional'"
            )
        return self


class FloorConfig(Strict):
    """The `bf16_floor` arm: a bf16 run whose rollout copy computes with other bf16 kernels than its
    trainer, so the two differ as a real BF16 trainer and a real BF16 rollout engine do (the `bf16` arm's
    two compute the same bits). Each GEMM output of the rollout copy moves by `scale` × a deterministic
    draw in [-1/2, 1/2) of its bf16 ulp before its bf16 rounding (fp8rl.fp8.kernel_floor); the scale is
    searched, before the first step, for the trainer-vs-rollout KL `target_kl` on held-out prompts at the
    base (fp8rl.engine.noise_target, as `fp8.target_kl`), or fixed with `scale`."""

    target_kl: float | None = Field(
        REAL_BF16_KL,
        gt=0.0,
        le=1.0,
        description=(
            "the per-token KL (k3) between the trainer and the rollout at the base that the floor's scale is "
            f"searched for; default {REAL_BF16_KL:g}, a healthy real BF16 stack's (docs/mismatch.md)"
        ),
    )
    scale: float | None = Field(
        None,
        ge=MIN_NOISE_SCALE,
        le=MAX_NOISE_SCALE,
        description="a fixed scale instead of a search (in bf16 ulps of each GEMM output); target_kl is then unset",
    )

    @model_validator(mode="before")
    @classmethod
    def _scale_replaces_target(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("scale") is not None and "target_kl" not in data:
            return {**data, "target_kl": None}
        return data

    @model_validator(mode="after")
    def _one_of(self) -> FloorConfig:
        if self.target_kl is not None and self.scale is not None:
            raise ValueError("give target_kl (the scale is searched) or scale (fixed), not both")
        if self.target_kl is None and self.scale is None:
            raise ValueError(f"give target_kl (e.g. {REAL_BF16_KL:g}) or scale")
        return self
