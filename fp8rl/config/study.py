"""The `study` section: a tier's pre-registration (docs/attribution.md).

Written into the config before any run, it names the arms (cells of the matrix without the seed), the
primary endpoint (one number per run: the mean of a metric over the last part of the run), the planned
contrasts with their test, and the smallest effect the tier should be able to see. The report
(fp8rl.report.planned) answers the planned contrasts with that test and keeps every other comparison
in a separate, exploratory table.

The unit of replication (`unit`): `run` (the default; each run's endpoint is one value, arms compared
with Welch's t-test) or `base` (runs start from several base models, `sft.per_seed` / `sft.bases`: each
arm's endpoints are first averaged within base, and a contrast is a paired t-test over the bases both
arms have, `test: paired_t`; fp8rl.report.paired). `min_seeds` counts units: seeds, or bases.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from fp8rl.config.base import Strict
from fp8rl.vocabulary import REWARD_MEAN

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class EndpointConfig(Strict):
    """One value per run: the mean of `metric` over the steps after `from_frac` of the planned steps, or,
    for a held-out metric (`heldout/greedy_acc`, `heldout/sampled_reward`, `heldout/sampled_format`;
    needs `eval.heldout`), the run's final checkpoint scored with the bf16 sampler (from_frac unused)."""

    metric: str = Field(REWARD_MEAN, description="a metrics.jsonl key, or heldout/{metric} of eval.heldout")
    from_frac: float = Field(
        0.5,
        ge=0.0,
        lt=1.0,
        description="the window starts after this fraction of schedule.steps (0.5: last half)",
    )


class ContrastConfig(Strict):
    """`arm` minus `reference`, each the mean of its runs' endpoints."""

    name: str = Field(pattern=_NAME, description="the contrast's name in the report's tables")
    arm: str = Field(description="the arm compared (a key of study.arms)")
    reference: str = Field(description="the arm it is compared with (a key of study.arms)")
    question: str = Field("", description="what the contrast decides, in words")


class StudyConfig(Strict):
    """The pre-registered design of a study tier (module docstring)."""

    # `unit` came after studies were published: left out of the dump at its default.
    OMIT_AT_DEFAULT = ("unit",)

    arms: dict[str, str] = Field(
        min_length=2,
        description="arm name -> its cell without the seed: algo/model/variant/granularity[/condition]",
    )
    endpoint: EndpointConfig = EndpointConfig()
    unit: Literal["run", "base"] = Field(
        "run",
        description="the unit of replication: each run (seed), or each base model (a run's endpoints "
        "averaged within its base; contrasts paired within base)",
    )
    test: Literal["welch_t", "paired_t"] = Field(
        "welch_t",
        description="welch_t: Welch's t-test on the per-seed endpoints (unequal variances, unpaired; unit "
        "run); paired_t: a paired t-test on the per-base differences (unit base, its default)",
    )
    sides: Literal["two-sided"] = Field("two-sided", description="the tests' sides (two-sided only)")
    alpha: float = Field(
        0.05,
        gt=0.0,
        lt=0.5,
        description="significance level of the planned contrasts' decisions (p adjusted by `multiplicity`)",
    )
    multiplicity: Literal["holm", "fixed_sequence", "none"] = Field(
        "holm",
        description="how the planned contrasts' p-values are adjusted as a family: holm (Holm's step-down), "
        "fixed_sequence (in the order `planned` lists them, each at the full alpha while every earlier one "
        "is rejected: for an ordered family, as a dose sweep tested from the largest dose down) or none",
    )
    min_effect: float = Field(gt=0.0, description="the smallest |difference| of endpoints worth seeing")
    planning_sd: float = Field(
        gt=0.0,
        description="the SD assumed for the planned power (before any run): of the per-seed endpoint "
        "(unit run), of the per-base difference arm - reference (unit base)",
    )
    min_seeds: int = Field(
        5,
        ge=2,
        description="units every arm of a planned contrast must have: seeds (unit run), or bases both "
        "arms share (unit base)",
    )
    planned: list[ContrastConfig] = Field(
        min_length=1, description="the contrasts tested as a family, each with a decision at alpha"
    )
    exploratory: list[ContrastConfig] = Field(
        [], description="further contrasts, reported unadjusted and without a decision"
    )

    @model_validator(mode="before")
    @classmethod
    def _paired_by_default(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("unit") == "base" and "test" not in data:
            return {**data, "test": "paired_t"}
        return data

    @model_validator(mode="after")
    def _test_fits_unit(self) -> StudyConfig:
        want = "paired_t" if self.unit == "base" else "welch_t"
        if self.test != want:
            raise ValueError(
                f"test: {self.test} with unit: {self.unit}; a study whose unit is the {self.unit} "
                f"uses test: {want}"
            )
        return self

    @model_validator(mode="after")
    def _names(self) -> StudyConfig:
        for arm in self.arms:
            if not _valid_name(arm):
                raise ValueError(f"arms: {arm!r} is not a name (letters, digits, '_', '.', '-')")
        contrasts = [*self.planned, *self.exploratory]
        names = [c.name for c in contrasts]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate contrast names: {', '.join(dup)}")
        for c in contrasts:
            for side in (c.arm, c.reference):
                if side not in self.arms:
                    raise ValueError(
                        f"contrast {c.name!r}: unknown arm {side!r}; arms: {', '.join(self.arms)}"
                    )
            if c.arm == c.reference:
                raise ValueError(f"contrast {c.name!r}: an arm against itself")
        return self

    def planned_arms(self) -> list[str]:
        """The arms that appear in a planned contrast, in the order of `arms`."""
        used = {a for c in self.planned for a in (c.arm, c.reference)}
        return [a for a in self.arms if a in used]


def _valid_name(name: str) -> bool:
    return re.match(_NAME, name) is not None


def arm_cell(run_id_prefix: str, run_id: str) -> bool:
    """Whether `run_id` (with its seed) is a run of the arm `run_id_prefix` (without it)."""
    return run_id.rsplit("/", 1)[0] == run_id_prefix.strip("/")


def check_arms(study: StudyConfig, run_ids: list[str], bases: dict[str, str] | None = None) -> None:
    """ValueError unless every arm names runs of the matrix, and every arm of a planned contrast has
    `min_seeds` units: seeds, or with `unit: base` bases (`bases`: run id -> the base it starts from)
    shared by the contrast's two arms (the pairs of its test)."""
    for arm, prefix in study.arms.items():
        n = sum(arm_cell(prefix, r) for r in run_ids)
        if n == 0:
            raise ValueError(f"study.arms.{arm}: {prefix!r} is no cell of the matrix (see `fp8rl matrix`)")
        if study.unit == "run" and arm in study.planned_arms() and n < study.min_seeds:
            raise ValueError(
                f"study.arms.{arm}: a planned arm with {n} seeds; study.min_seeds is {study.min_seeds}"
            )
    if study.unit == "base":
        if bases is None:
            raise ValueError("study.unit: base needs each run's base model to count the units")

        def of(arm: str) -> set[str]:
            return {bases[r] for r in run_ids if arm_cell(study.arms[arm], r)}

        for c in study.planned:
            shared = of(c.arm) & of(c.reference)
            if len(shared) < study.min_seeds:
                raise ValueError(
                    f"study.planned.{c.name}: its arms share {len(shared)} base model(s) "
                    f"({', '.join(sorted(shared)) or 'none'}); with unit: base a contrast pairs its arms "
                    f"within base and study.min_seeds is {study.min_seeds} (sft.per_seed / sft.bases)"
                )
