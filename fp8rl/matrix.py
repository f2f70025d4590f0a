"""The run matrix: one `RunSpec` per cell (algorithm × model × variant × granularity [× noise dose] × seed).

A run id is `{algo}/{model}/{variant}/{granularity}/seed{seed}` (bf16 runs use granularity `none`).
A tier with a dose axis (`matrix.noise_scales`) has one more segment before the seed,
`{algo}/{model}/{variant}/{granularity}/noise{dose}/seed{seed}`: the run's `fp8.noise_scale`
(`run_config` applies it; bf16 runs, with nothing quantized, have dose 1). `RunSpec.parse` is the inverse. `expand_matrix` lists a config's cells in a stable order, `find_run`
checks that a run id belongs to a config, `reference_run` names the bf16 run a calibrated run reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fp8rl.vocabulary import (
    ALGORITHMS,
    NO_GRANULARITY,
    VARIANT_SPECS,
    VARIANTS,
    VariantSpec,
    granularities_of,
)

if TYPE_CHECKING:
    from fp8rl.config import ExperimentConfig

AXES = ("algo", "model", "variant", "granularity", "noise", "seed")


@dataclass(frozen=True, order=True)
class RunSpec:
    """One cell of the matrix."""

    algo: str
    model: str
    variant: str
    granularity: str
    seed: int
    noise: float | None = None  # the fp8.noise_scale dose, in tiers with a dose axis

    @property
    def run_id(self) -> str:
        dose = "" if self.noise is None else f"{noise_segment(self.noise)}/"
        return f"{self.algo}/{self.model}/{self.variant}/{self.granularity}/{dose}seed{self.seed}"

    @property
    def spec(self) -> VariantSpec:
        return VARIANT_SPECS[self.variant]

    @classmethod
    def parse(cls, run_id: str) -> RunSpec:
        """Inverse of `run_id`; raises ValueError naming the part that is wrong."""
        parts = run_id.strip("/").split("/")
        noise = None
        if len(parts) == 6 and parts[4].startswith("noise"):
            noise = _parse_noise(run_id, parts.pop(4))
        if len(parts) != 5 or not parts[4].startswith("seed"):
            raise ValueError(
                f"run id {run_id!r} is not of the form algo/model/variant/granularity/[noiseX/]seedN"
            )
        algo, model, variant, gran, seed = parts
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
        try:
            seed_n = int(seed[4:])
        except ValueError:
            raise ValueError(f"run id {run_id!r}: seed {seed!r} is not seed<integer>") from None
        return cls(algo, model, variant, gran, seed_n, noise)


def noise_segment(noise: float) -> str:
    """The run-id segment of a dose: `noise1`, `noise2`, `noise0.5`."""
    return f"noise{noise:g}"


def _parse_noise(run_id: str, segment: str) -> float:
    try:
        noise = float(segment[len("noise") :])
    except ValueError:
        raise ValueError(f"run id {run_id!r}: {segment!r} is not noise<number>") from None
    if not noise > 0 or noise_segment(noise) != segment:
        raise ValueError(f"run id {run_id!r}: {segment!r} is not a positive dose written as noise<number>")
    return noise


def expand_matrix(cfg: ExperimentConfig, **filters: list[str] | None) -> list[RunSpec]:
    """Every run of the experiment, in a stable order (algo, model, variant, granularity, noise, seed).

    `filters` maps an axis name (AXES) to the values to keep.
    """
    m = cfg.matrix
    runs = [
        RunSpec(algo, model, variant, gran, seed, noise)
        for algo in m.algorithms
        for model in m.models
        for variant in m.variants
        for gran in m.granularities_for(variant)
        for noise in m.noise_scales_for(variant)
        for seed in m.seeds_for(noise)
    ]
    for axis, keep in filters.items():
        if axis not in AXES:
            raise ValueError(f"expand_matrix: unknown axis {axis!r}; allowed: {', '.join(AXES)}")
        if keep:
            wanted = {str(k) for k in keep}
            runs = [r for r in runs if _axis_text(r, axis) in wanted]
    return runs


def _axis_text(run: RunSpec, axis: str) -> str:
    value = getattr(run, axis)
    return f"{value:g}" if axis == "noise" and value is not None else str(value)


def run_config(cfg: ExperimentConfig, run: RunSpec) -> ExperimentConfig:
    """The config one run trains with: `cfg`, with `fp8.noise_scale` set to the run's dose when the tier
    has a dose axis (the run's resolved config.yaml and checkpoint digest then carry it)."""
    if run.noise is None:
        return cfg
    return cfg.model_copy(update={"fp8": cfg.fp8.model_copy(update={"noise_scale": run.noise})})


def find_run(cfg: ExperimentConfig, run_id: str) -> RunSpec:
    """The matrix cell with this id; ValueError if the config does not contain it."""
    spec = RunSpec.parse(run_id)
    if spec not in set(expand_matrix(cfg)):
        raise ValueError(f"run {run_id!r} is not in the matrix of this config (see `fp8rl matrix`)")
    return spec


def reference_run(spec: RunSpec) -> RunSpec:
    """The bf16 run that a `calib.reference: run` cell reads its target quantiles from."""
    return RunSpec(
        spec.algo, spec.model, "bf16", NO_GRANULARITY, spec.seed, None if spec.noise is None else 1.0
    )
