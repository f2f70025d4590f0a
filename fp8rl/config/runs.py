"""The run matrix: one `RunSpec` per cell (algorithm × model × variant × granularity × seed, and in
study tiers × FP8 condition).

A run id is `{algo}/{model}/{variant}/{granularity}/seed{seed}` (bf16 runs use granularity `none`); in a
matrix with `conditions` it is `{algo}/{model}/{variant}/{granularity}/{condition}/seed{seed}` (bf16 runs
use condition `none`). `RunSpec.parse` is its inverse. `expand_matrix` lists a config's cells in a stable order, `find_run`
checks that a run id belongs to a config, `reference_run` names the bf16 run a calibrated run reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from fp8rl.config.matrix import MatrixConfig
from fp8rl.vocabulary import (
    ALGORITHMS,
    NO_CONDITION,
    NO_GRANULARITY,
    REFERENCE_VARIANT,
    VARIANT_SPECS,
    VARIANTS,
    VariantSpec,
    granularities_of,
)


class HasMatrix(Protocol):
    """What the expansion reads of an experiment config: its `matrix` section."""

    matrix: MatrixConfig


AXES = ("algo", "model", "variant", "granularity", "seed", "condition")


@dataclass(frozen=True, order=True)
class RunSpec:
    """One cell of the matrix."""

    algo: str
    model: str
    variant: str
    granularity: str
    seed: int
    condition: str | None = None  # the FP8 condition of a study tier's run; None outside such tiers

    @property
    def run_id(self) -> str:
        cond = "" if self.condition is None else f"{self.condition}/"
        return f"{self.algo}/{self.model}/{self.variant}/{self.granularity}/{cond}seed{self.seed}"

    @property
    def spec(self) -> VariantSpec:
        return VARIANT_SPECS[self.variant]

    @classmethod
    def parse(cls, run_id: str) -> RunSpec:
        """Inverse of `run_id`; raises ValueError naming the part that is wrong."""
        parts = run_id.strip("/").split("/")
        if len(parts) not in (5, 6) or not parts[-1].startswith("seed"):
            raise ValueError(
                f"run id {run_id!r} is not of the form algo/model/variant/granularity/[condition/]seedN"
            )
        algo, model, variant, gran, *cond, seed = parts
        condition = cond[0] if cond else None
        if algo not in ALGORITHMS:
            raise ValueError(
                f"run id {run_id!r}: unknown algorithm {algo!r}; allowed: {', '.join(ALGORITHMS)}"
            )
        if variant not in VARIANTS:
            raise ValueError(
                f"run id {run_id!r}: unknown variant {variant!r}; allowed: {', '.join(VARIANTS)}"
            )
        allowed = granularities_of(variant)
        if gran not in allowed:
            raise ValueError(f"run id {run_id!r}: granularity {gran!r}; allowed: {', '.join(allowed)}")
        if condition is not None and not VARIANT_SPECS[variant].fp8 and condition != NO_CONDITION:
            raise ValueError(f"run id {run_id!r}: {variant} runs have condition {NO_CONDITION!r}")
        try:
            seed_n = int(seed[4:])
        except ValueError:
            raise ValueError(f"run id {run_id!r}: seed {seed!r} is not seed<integer>") from None
        return cls(algo, model, variant, gran, seed_n, condition)


def expand_matrix(cfg: HasMatrix, **filters: list[str] | None) -> list[RunSpec]:
    """Every run of the experiment, in a stable order (algo, model, variant, granularity, condition, seed).

    `filters` maps an axis name (AXES) to the values to keep.
    """
    m = cfg.matrix
    runs = [
        RunSpec(algo, model, variant, gran, seed, cond)
        for algo in m.algorithms
        for model in m.models
        for variant in m.variants
        for gran in m.granularities_for(variant)
        for cond in m.conditions_for(variant, gran)
        for seed in m.seeds_for(cond)
    ]
    for axis, keep in filters.items():
        if axis not in AXES:
            raise ValueError(f"expand_matrix: unknown axis {axis!r}; allowed: {', '.join(AXES)}")
        if keep:
            wanted = {str(k) for k in keep}
            runs = [r for r in runs if str(getattr(r, axis)) in wanted]
    return runs


def find_run(cfg: HasMatrix, run_id: str) -> RunSpec:
    """The matrix cell with this id; ValueError if the config does not contain it."""
    spec = RunSpec.parse(run_id)
    if spec not in set(expand_matrix(cfg)):
        raise ValueError(f"run {run_id!r} is not in the matrix of this config (see `fp8rl matrix`)")
    return spec


def reference_run(spec: RunSpec) -> RunSpec:
    """The bf16 run that a `calib.reference: run` cell reads its target quantiles from."""
    cond = None if spec.condition is None else NO_CONDITION
    return RunSpec(spec.algo, spec.model, REFERENCE_VARIANT, NO_GRANULARITY, spec.seed, cond)
