"""The `matrix` section: the axes whose product is the run matrix (algorithms, models, variants, FP8
granularities, seeds) and a study tier's named FP8 conditions (overrides of `fp8` and, for calibrated
variants, of `calib`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator, model_validator

from fp8rl.config.base import NAME_MAX, NAME_PATTERN, SEED_MAX, AlgoName, GranularityName, Strict, VariantName
from fp8rl.config.precision import CalibConfig, FP8Config
from fp8rl.vocabulary import GRANULARITIES, NO_CONDITION, NO_GRANULARITY, VARIANT_SPECS


class ConditionConfig(Strict):
    """A named FP8 setting of a study tier: overrides of the `fp8` section for the fp8 variants' runs
    (e.g. `{name: e5m2_s2, fp8: {format: e5m2, noise_scale: 2}}`), and optionally of the `calib` section
    for its calibrated variants' runs (e.g. `{name: s4_fixed, fp8: {noise_scale: 4}, calib: {upper:
    fixed}, variants: [fp8_tis_calib]}`). bf16 runs have condition `none`."""

    # `calib` came after conditions were published: left out of the dump while empty, so the digests
    # of those configs stay as they were.
    OMIT_AT_DEFAULT = ("calib",)

    name: str = Field(
        pattern=NAME_PATTERN,
        max_length=NAME_MAX,
        description="the condition's name, a part of its runs' ids ({granularity}/{name}/seed{seed})",
    )
    fp8: dict[str, Any] = Field({}, description="overrides of the `fp8` section")
    calib: dict[str, Any] = Field(
        {},
        description="overrides of the `calib` section for this condition's calibrated (*_calib) runs",
    )
    granularities: list[GranularityName] | None = Field(
        None, description="the granularities this condition applies to (default: all of the matrix's)"
    )
    variants: list[VariantName] | None = Field(
        None, description="the fp8 variants this condition applies to (default: all of the matrix's)"
    )
    seeds: list[Annotated[int, Field(strict=True, ge=0, le=SEED_MAX)]] | None = Field(
        None,
        description="the seeds this condition runs (default: all of the matrix's), e.g. fewer for a dose sweep",
    )

    @model_validator(mode="after")
    def _known_keys(self) -> ConditionConfig:
        if not self.fp8 and not self.calib:
            raise ValueError(f"{self.name!r}: a condition overrides `fp8`, `calib` or both; it has neither")
        # unknown keys and bad values fail here, under this condition (the error names the key)
        FP8Config.model_validate(self.fp8)
        _check_calib_keys(self.calib)
        if self.name == NO_CONDITION:
            raise ValueError(f"name: {NO_CONDITION!r} is reserved for the bf16 runs of a conditions matrix")
        return self


def _check_calib_keys(calib: dict[str, Any]) -> None:
    """ValueError naming `calib.<key>` for an unknown key or a bad value of a condition's override
    (checked key by key: how the override combines with the tier's section is the experiment's check)."""
    for key, value in calib.items():
        if key not in CalibConfig.model_fields:
            raise ValueError(
                f"calib.{key}: unknown key; allowed keys here: {', '.join(CalibConfig.model_fields)}"
            )
        try:
            CalibConfig.model_validate({key: value})
        except ValidationError as exc:
            msg = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise ValueError(f"calib.{key}: {msg}") from None


class MatrixConfig(Strict):
    """The axes whose product is the run matrix."""

    algorithms: list[AlgoName] = Field(
        min_length=1, description="RL algorithms (settings: algorithms.<name>)"
    )
    models: list[str] = Field(min_length=1, description="the models to train (names of `models` entries)")
    variants: list[VariantName] = Field(
        min_length=1, description="precision variants (bf16, fp8, fp8_tis, ...)"
    )
    granularities: list[GranularityName] = Field(
        ["tensorwise"],
        min_length=1,
        description="FP8 scaling granularities of the fp8 variants' runs (the others run `none`)",
    )
    seeds: list[Annotated[int, Field(strict=True, ge=0, le=SEED_MAX)]] = Field(
        min_length=1, description="RL seeds: every cell runs once per seed"
    )
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
            variants = [v for v in (c.variants or self.variants) if v in self.variants]
            if c.calib and not any(VARIANT_SPECS[v].calib for v in variants):
                raise ValueError(
                    f"conditions: {c.name!r} overrides calib ({', '.join(c.calib)}), but none of its "
                    f"variants ({', '.join(variants) or 'none of the matrix'}) calibrates; give it a "
                    "*_calib variant or drop the override"
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
