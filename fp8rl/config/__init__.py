"""Typed experiment config: the single source of truth.

One YAML file describes one experiment (a tier): the models, the algorithms with their hyperparameters,
the precision variants, FP8 granularities and seeds whose product is the run matrix, the schedule, the
evaluation suites and the per-rule resources. Everything else (the CLI, the Snakefile, the trainer,
the verl adapter) reads it through these pydantic models; `fp8rl config schema` exports their JSON schema,
`fp8rl.config_loader` reads a YAML file into them, `runs` expands the matrix into run specs and
`resolved` turns one run spec into the frozen settings of that run.

One module per part of the file (module: the YAML sections it types); each imports only `base` and the
modules above it in this list:

- `base`: no section; `Strict` (unknown keys are errors, no boolean numbers), `SAFE_PATH`, `HUB_ID`, the
  bounds of names and seeds, `Fraction` and the vocabulary's field types
- `models`: `models` (`ModelConfig`, `ArchConfig`)
- `algorithms`: `algorithms` (`GRPOConfig`, `DAPOConfig`)
- `precision`: `fp8`, `tis`, `calib`, `floor` (`FloorConfig`: the `bf16_floor` arm's rollout), and the
  range of a searched noise scale (`MIN_NOISE_SCALE`, `MAX_NOISE_SCALE`)
- `training`: `schedule`, `task`, `sft`, `stability`
- `evaluation`: `eval`
- `acceptance`: `acceptance` (`AcceptanceConfig`: a testbed's bf16-only acceptance)
- `failure_search`: `failure_search` (`FailureSearchConfig`: the failure rule of a search along
  `fp8.target_kl`)
- `infrastructure`: `resources`, `hub`, `containers`, `tracking`
- `limits`: `limits` (`LIMITS`, the bounds on what a config may ask of a machine, and `limit_problems`)
- `matrix`: `matrix` (`MatrixConfig`, a study's `ConditionConfig`s)
- `runs`: no section; the matrix's cells (`RunSpec`, its run id), `expand_matrix`, `find_run`,
  `reference_run`
- `study`: `study` (`StudyConfig`: a study tier's pre-registration, its arms checked against the matrix)
- `experiment`: `ExperimentConfig` (the whole file, its cross-section checks and digests),
  `TRAIN_SECTIONS`, `RESOURCE_RULES`
- `resolved`: no section; `ResolvedRun`, one run's settings (its algorithm, FP8 settings under its
  condition, calib settings with its condition's overrides, fixed clip bounds, reference run, training
  digest), built once by `resolve_run(cfg, spec)`

Import the names from `fp8rl.config`, not from the modules. Names follow docs/architecture.md#names; a
run id is `{algo}/{model}/{variant}/{granularity}/seed{seed}` and `bf16` runs use granularity `none`.
"""

from fp8rl.config.acceptance import AcceptanceConfig
from fp8rl.config.algorithms import AlgorithmBase, AlgorithmsConfig, DAPOConfig, GRPOConfig
from fp8rl.config.base import (
    ARCHIVE_DIR,
    HUB_ID,
    NAME_MAX,
    NAME_PATTERN,
    PATH_PART_MAX,
    PUBLISHED_DIR,
    SAFE_PATH,
    SEED_MAX,
    AlgoName,
    CalibReferenceField,
    Fraction,
    GranularityName,
    LossAggMode,
    Strict,
    VariantName,
    in_published,
    is_hub_id,
    is_safe_path,
    long_path_part,
    tier_problem,
)
from fp8rl.config.evaluation import EvalConfig, HeldoutConfig, TaskName
from fp8rl.config.experiment import RESOURCE_RULES, TRAIN_SECTIONS, ExperimentConfig
from fp8rl.config.failure_search import FailureSearchConfig
from fp8rl.config.infrastructure import (
    ContainersConfig,
    HubConfig,
    MlflowConfig,
    Resources,
    TrackingConfig,
    WandbConfig,
)
from fp8rl.config.limits import LIMITS, limit_problems
from fp8rl.config.matrix import ConditionConfig, MatrixConfig
from fp8rl.config.models import ArchConfig, ModelConfig
from fp8rl.config.precision import (
    MAX_NOISE_SCALE,
    MIN_NOISE_SCALE,
    CalibConfig,
    FloorConfig,
    FP8Config,
    TISConfig,
)
from fp8rl.config.resolved import ResolvedRun, resolve_run
from fp8rl.config.runs import AXES, HasMatrix, RunSpec, expand_matrix, find_run, reference_run
from fp8rl.config.study import ContrastConfig, EndpointConfig, StudyConfig, arm_cell, check_arms
from fp8rl.config.training import (
    STEPS_MAX,
    ScheduleConfig,
    SFTConfig,
    StabilityConfig,
    SubwordTokenizerConfig,
    TaskConfig,
)

__all__ = [
    "AcceptanceConfig",
    "AXES",
    "HUB_ID",
    "LIMITS",
    "MAX_NOISE_SCALE",
    "MIN_NOISE_SCALE",
    "NAME_MAX",
    "NAME_PATTERN",
    "PATH_PART_MAX",
    "PUBLISHED_DIR",
    "ARCHIVE_DIR",
    "RESOURCE_RULES",
    "SAFE_PATH",
    "SEED_MAX",
    "STEPS_MAX",
    "TRAIN_SECTIONS",
    "AlgoName",
    "AlgorithmBase",
    "AlgorithmsConfig",
    "ArchConfig",
    "CalibConfig",
    "CalibReferenceField",
    "ConditionConfig",
    "ContrastConfig",
    "ContainersConfig",
    "DAPOConfig",
    "EndpointConfig",
    "EvalConfig",
    "FailureSearchConfig",
    "HeldoutConfig",
    "ExperimentConfig",
    "FP8Config",
    "FloorConfig",
    "Fraction",
    "GRPOConfig",
    "GranularityName",
    "HasMatrix",
    "HubConfig",
    "LossAggMode",
    "MatrixConfig",
    "MlflowConfig",
    "ModelConfig",
    "ResolvedRun",
    "Resources",
    "RunSpec",
    "SFTConfig",
    "ScheduleConfig",
    "StabilityConfig",
    "SubwordTokenizerConfig",
    "StudyConfig",
    "Strict",
    "TISConfig",
    "TaskConfig",
    "TaskName",
    "TrackingConfig",
    "VariantName",
    "WandbConfig",
    "arm_cell",
    "check_arms",
    "expand_matrix",
    "find_run",
    "in_published",
    "is_hub_id",
    "is_safe_path",
    "limit_problems",
    "long_path_part",
    "reference_run",
    "resolve_run",
    "tier_problem",
]
