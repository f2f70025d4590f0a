"""`ExperimentConfig`, the whole YAML file of one experiment (a tier), with the checks across its sections
and the digests the DAG and the trainer compare: `TRAIN_SECTIONS` are the sections a training run's
result depends on, `RESOURCE_RULES` the keys of `resources`."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from fp8rl.config.acceptance import AcceptanceConfig
from fp8rl.config.algorithms import AlgorithmsConfig, DAPOConfig, GRPOConfig
from fp8rl.config.base import (
    PATH_PART_MAX,
    PUBLISHED_DIR,
    Strict,
    in_published,
    is_safe_path,
    long_path_part,
    tier_problem,
)
from fp8rl.config.evaluation import EvalConfig
from fp8rl.config.failure_search import FailureSearchConfig
from fp8rl.config.infrastructure import ContainersConfig, HubConfig, Resources, TrackingConfig
from fp8rl.config.limits import LIMITS
from fp8rl.config.matrix import MatrixConfig
from fp8rl.config.models import ModelConfig
from fp8rl.config.precision import CalibConfig, FloorConfig, FP8Config, TISConfig
from fp8rl.config.runs import RunSpec, expand_matrix
from fp8rl.config.study import StudyConfig, check_arms
from fp8rl.config.training import ScheduleConfig, SFTConfig, StabilityConfig, TaskConfig
from fp8rl.vocabulary import (
    HELDOUT_METRICS,
    HELDOUT_TASKS,
    NO_CONDITION,
    NUMERICS_MODES,
    VARIANT_SPECS,
)

# The config sections a training run's result depends on (not the matrix, eval, resources,
# containers or results_dir).
TRAIN_SECTIONS = (
    "numerics",
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
# The `resources` keys: the rules that read them (every eval rule reads `eval`: the host's one eval job per run,
# or a suite's own rule with images) and the fallback.
RESOURCE_RULES = ("default", "data", "sft", "train", "eval", "report")


class ExperimentConfig(Strict):
    """One experiment (a tier): the whole YAML file."""

    OMIT_AT_DEFAULT = ("study", "limits", "floor", "acceptance", "failure_search")

    tier: str = Field(
        description="the tier's name, any path-safe folder name: its outputs go to {results_dir}/{tier}/ "
        "(the shipped tiers are the configs in config/)"
    )
    backend: Literal["reference", "verl"] = Field(
        "reference", description="reference: fp8rl's own trainer; verl: the cluster path"
    )
    results_dir: str = Field(
        "results", description="output root, relative to the project unless it starts with '/'"
    )
    numerics: Literal[NUMERICS_MODES] = Field(
        "reproducible",
        description="reproducible: one pinned kernel path on every x86 CPU; fast: the machine's best kernels",
    )
    models: list[ModelConfig] = Field(min_length=1, description="the base models; matrix.models names them")
    algorithms: AlgorithmsConfig = AlgorithmsConfig()
    matrix: MatrixConfig
    fp8: FP8Config = FP8Config()
    tis: TISConfig = TISConfig()
    calib: CalibConfig = CalibConfig()
    floor: FloorConfig | None = Field(
        None,
        description="the bf16_floor arm's rollout floor (fp8rl.fp8.kernel_floor); None: a target KL of a "
        "healthy real BF16 stack's",
    )
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
    limits: dict[str, float] = Field(
        {},
        description="raised bounds (fp8rl.config.limits): key -> the bound this config means to go up to",
    )
    study: StudyConfig | None = Field(
        None,
        description="a study tier's pre-registration: arms, endpoint, planned contrasts (docs/attribution.md)",
    )
    acceptance: AcceptanceConfig | None = Field(
        None, description="a testbed's acceptance on its bf16 runs, before any FP8 run (docs/longform.md)"
    )
    failure_search: FailureSearchConfig | None = Field(
        None,
        description="the failure rule of a search along fp8.target_kl, before its runs (docs/longform.md)",
    )

    @field_validator("tier")
    @classmethod
    def _tier(cls, v: str) -> str:
        if (problem := tier_problem(v)) is not None:
            raise ValueError(problem)
        return v

    @field_validator("results_dir")
    @classmethod
    def _results_dir(cls, v: str) -> str:
        if (part := long_path_part(v)) is not None:
            raise ValueError(
                f"the part {part[:20]}... is {len(part.encode())} bytes long; a file or folder name can "
                f"be at most {PATH_PART_MAX}"
            )
        if not is_safe_path(v):
            raise ValueError(
                f"{v!r} is not a safe path: use letters, digits, '_', '.', '-' and '/' between parts "
                "(no spaces, quotes, '$' or '..'; each part starts with a letter, digit or '_'), "
                "relative to the project or absolute"
            )
        if in_published(v):
            raise ValueError(
                f"{v!r} is or lies inside a {PUBLISHED_DIR!r} folder, where `fp8rl publish` keeps the "
                "committed publications: a tier there would read them as its own outputs; use a folder of "
                "its own, e.g. results or results/ci"
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
        unknown = [k for k in self.limits if k not in LIMITS]
        if unknown:
            raise ValueError(f"limits.{unknown[0]}: unknown key; allowed keys here: {', '.join(LIMITS)}")
        # What the verl backend can run is checked by fp8rl.adapters.verl_support.verl_problems, one of
        # the checks `fp8rl config validate` and the Snakefile run (fp8rl.validation.CONFIG_CHECKS).
        self._check_mini_batches()
        if self.sft.bases is not None:
            used = sorted({self.sft.base_seed(s) for s in self.matrix.seeds})
            if len(used) < self.sft.bases:
                raise ValueError(
                    f"sft.bases: {self.sft.bases}, but the matrix's seeds {self.matrix.seeds} start from "
                    f"bases {used} only (seed s starts from base s % {self.sft.bases}); use seeds that "
                    "reach every base, e.g. consecutive ones"
                )
        for c in self.matrix.conditions:
            if c.calib:
                try:
                    self.calib_for(c.name)
                except ValidationError as exc:
                    msg = exc.errors()[0]["msg"].removeprefix("Value error, ")
                    raise ValueError(f"matrix.conditions: {c.name!r}: its calib override: {msg}") from None
        self._check_floor()
        if self.eval.heldout is not None:
            generated = HELDOUT_TASKS
            if self.backend != "reference" or self.task.name not in generated:
                raise ValueError(
                    "eval.heldout: the held-out bf16 endpoint needs backend 'reference' and a generated "
                    f"task ({', '.join(generated)}); this config has backend {self.backend!r}, task "
                    f"{self.task.name!r}"
                )
        if self.study is not None and self.study.endpoint.metric.startswith("heldout/"):
            allowed = tuple(f"heldout/{m}" for m in HELDOUT_METRICS)
            if self.eval.heldout is None or self.study.endpoint.metric not in allowed:
                raise ValueError(
                    f"study.endpoint.metric: {self.study.endpoint.metric!r} is a held-out endpoint: it needs "
                    f"eval.heldout and one of {', '.join(allowed)}"
                )
        if self.study is not None:
            runs = self.runs()
            bases = {r.run_id: self.base_of(r.model, r.seed) for r in runs}
            check_arms(self.study, [r.run_id for r in runs], bases)
        self._check_failure_search()
        return self

    def _check_failure_search(self) -> None:
        """A `failure_search` needs a study with its `reference` arm and, for every condition of the
        matrix, a `fp8.target_kl` and one arm of the decisive variant (fp8rl.config.failure_search)."""
        fs = self.failure_search
        if fs is None:
            return
        if self.study is None or fs.reference not in self.study.arms:
            known = ", ".join(self.study.arms) if self.study is not None else "no study section"
            raise ValueError(f"failure_search.reference: {fs.reference!r} is no study arm ({known})")
        if not self.matrix.conditions:
            raise ValueError("failure_search: the matrix has no conditions to search along (fp8.target_kl)")
        cells = {cell.strip("/") for cell in self.study.arms.values()}
        for c in self.matrix.conditions:
            if self.fp8_for(c.name).target_kl is None:
                raise ValueError(f"failure_search: condition {c.name!r} sets no fp8.target_kl")
            if not any(cell.split("/")[2] == fs.decisive and cell.endswith(f"/{c.name}") for cell in cells):
                raise ValueError(
                    f"failure_search.decisive: no study arm of {fs.decisive} at condition {c.name!r}"
                )

    def _check_floor(self) -> None:
        """A `floor` section needs a `bf16_floor` run to apply to; that arm runs on the reference trainer
        (a verl stack's bf16 rollout engine has its real floor already)."""
        floored = [v for v in self.matrix.variants if VARIANT_SPECS[v].floor]
        if self.floor is not None and not floored:
            raise ValueError(
                "floor: set, but matrix.variants has no bf16_floor arm for it to apply to (the bf16 arm "
                "stays exact); add bf16_floor or drop the section"
            )
        if floored and self.backend != "reference":
            raise ValueError(
                f"matrix.variants: {floored[0]} models a bf16 rollout engine's own kernels on the reference "
                f"trainer; backend {self.backend!r} runs a real engine, whose bf16 arm has its floor already"
            )

    def _check_mini_batches(self) -> None:
        """`mini_batches` updates per epoch, exactly: verl's mini-batch is prompts_per_step // mini_batches
        prompts (at least 1) and the reference trainer's ceil(sequences / mini_batches) sequences, so a
        count the batch does not split into ran fewer updates, silently (and a calibrated run's N/(N-1)
        over updates_per_step was then wrong)."""
        mb, prompts = self.schedule.mini_batches, self.schedule.prompts_per_step
        if self.backend == "verl":
            if prompts % mb:
                raise ValueError(
                    f"schedule.mini_batches {mb} does not divide schedule.prompts_per_step {prompts} (verl "
                    "splits a step's prompts into equal mini-batches: fewer updates than asked); choose a "
                    "divisor of prompts_per_step"
                )
            return
        for name in self.matrix.algorithms:
            n = prompts * self.algorithm(name).group_size
            size = -(-n // mb)
            if -(-n // size) != mb:
                raise ValueError(
                    f"schedule.mini_batches {mb}: the {n} rollout sequences of a step (prompts_per_step x "
                    f"algorithms.{name}.group_size) split into {-(-n // size)} mini-batches of {size}, not "
                    f"{mb}; choose a divisor of {n}"
                )

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

    def floor_for(self, variant: str) -> FloorConfig | None:
        """The rollout floor of a run of `variant`: the `floor` section (its defaults when the config has
        none) for a `bf16_floor` run, None for every other variant."""
        if not VARIANT_SPECS[variant].floor:
            return None
        return self.floor if self.floor is not None else FloorConfig()

    def calib_for(self, condition: str | None) -> CalibConfig:
        """The `calib` section a calibrated run under `condition` uses: the tier's, with the condition's
        `calib` overrides (none: the tier's section itself)."""
        if condition is None or condition == NO_CONDITION:
            return self.calib
        for c in self.matrix.conditions:
            if c.name == condition:
                if not c.calib:
                    return self.calib
                return CalibConfig.model_validate({**self.calib.model_dump(mode="json"), **c.calib})
        raise KeyError(f"no condition named {condition!r}")

    def base_of(self, model: str, seed: int) -> str:
        """The name of the base model a run of `model` with RL seed `seed` starts from: `{model}/seed{b}`
        for a per-seed base (b = `sft.base_seed(seed)`), `{model}` for a tier's shared scratch base, the
        model's `source` for a pretrained one."""
        source = self.model(model).source
        if source != "scratch":
            return source
        b = self.sft.base_seed(seed)
        return model if b is None else f"{model}/seed{b}"

    def algorithm(self, name: str) -> GRPOConfig | DAPOConfig:
        return getattr(self.algorithms, name)

    def resources_for(self, rule: str) -> Resources:
        return self.resources.get(rule, self.resources.get("default", Resources()))

    def runs(self) -> list[RunSpec]:
        return expand_matrix(self)

    def digest(self) -> str:
        """A short hash of the resolved config, for provenance."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def section_digest(
        self,
        *sections: str,
        model: str | None = None,
        condition: str | None = None,
        variant: str | None = None,
    ) -> str:
        """A short hash of some top-level sections (plus one model's entry, plus the FP8 settings of one
        condition of a study matrix, and its calib settings when it overrides them and `variant`
        calibrates or is not given): what a step's output depends on. The DAG reruns a rule when its
        digest changes; the trainer resumes a checkpoint only when its `TRAIN_SECTIONS` digest still
        matches."""
        full = self.model_dump(mode="json")
        picked = {s: full[s] for s in sections}
        return self._digest_of(picked, model=model, condition=condition, variant=variant)

    def base_digest(self, model: str) -> str:
        """The digest a scratch model's base (its SFT) depends on: `numerics`, `task`, `sft` and the
        model's entry, without `sft.bases` (which runs share a base does not change the base: bases
        trained before `bases` was set are reused)."""
        full = self.model_dump(mode="json")
        picked = {s: full[s] for s in ("numerics", "task", "sft")}
        picked["sft"] = {k: v for k, v in picked["sft"].items() if k != "bases"}
        return self._digest_of(picked, model=model)

    def _digest_of(
        self,
        picked: dict,
        *,
        model: str | None = None,
        condition: str | None = None,
        variant: str | None = None,
    ) -> str:
        if model is not None:
            picked["model"] = self.model(model).model_dump(mode="json")
        # only a floor run adds the key: every other run keeps its digest
        if variant is not None and (floor := self.floor_for(variant)) is not None:
            picked["floor"] = floor.model_dump(mode="json")
        if condition is not None and condition != NO_CONDITION:
            picked["condition"] = self.fp8_for(condition).model_dump(mode="json")
            # only a condition that overrides calib adds the key: the others keep their digests
            calibrates = variant is None or VARIANT_SPECS[variant].calib
            if calibrates and self._condition(condition).calib:
                picked["condition_calib"] = self.calib_for(condition).model_dump(mode="json")
        return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:16]

    def _condition(self, name: str):
        for c in self.matrix.conditions:
            if c.name == name:
                return c
        raise KeyError(f"no condition named {name!r}")
