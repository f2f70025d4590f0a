"""The project's names, defined once: config values, run ids, metric keys and tables all use these.

Lowest floor: imports nothing from fp8rl, so the config, the FP8 numerics (`fp8rl.fp8`), the RL
objectives (`fp8rl.rl`), the DAG's run-id pattern and the report all import their vocabulary from here.
docs/architecture.md ("Names") is the user-facing description.
"""

from __future__ import annotations

from dataclasses import dataclass

# ------------------------------------------------------------------------------------------ the matrix

# How the math libraries pick kernels (fp8rl.numerics): one pinned path, or the machine's best.
NUMERICS_MODES = ("reproducible", "fast")

TIERS = ("smoke", "mechanism", "stress", "small", "paper")
ALGORITHMS = ("grpo", "dapo")
VARIANTS = ("bf16", "fp8", "fp8_tis", "fp8_calib", "fp8_tis_calib")
# Recipe-level FP8 granularities (a run id's granularity); `bf16` runs use NO_GRANULARITY.
GRANULARITIES = ("tensorwise", "delayed", "rowwise", "blockwise", "mxfp8")
NO_GRANULARITY = "none"
# A study tier's matrix may repeat every fp8 run under named FP8 conditions (format, noise dose, KV cache):
# the condition is then part of the run id, and bf16 runs have condition NO_CONDITION.
NO_CONDITION = "none"


@dataclass(frozen=True)
class VariantSpec:
    """What a variant name means: precision, and which fixes it turns on."""

    name: str
    fp8: bool
    tis: bool
    calib: bool


VARIANT_SPECS = {
    "bf16": VariantSpec("bf16", fp8=False, tis=False, calib=False),
    "fp8": VariantSpec("fp8", fp8=True, tis=False, calib=False),
    "fp8_tis": VariantSpec("fp8_tis", fp8=True, tis=True, calib=False),
    "fp8_calib": VariantSpec("fp8_calib", fp8=True, tis=False, calib=True),
    "fp8_tis_calib": VariantSpec("fp8_tis_calib", fp8=True, tis=True, calib=True),
}
assert tuple(VARIANT_SPECS) == VARIANTS


def granularities_of(variant: str) -> tuple[str, ...]:
    """The granularities a run of `variant` can have: `none` for bf16, the FP8 recipes otherwise."""
    return (NO_GRANULARITY,) if not VARIANT_SPECS[variant].fp8 else GRANULARITIES


# ----------------------------------------------------------------------------------------- FP8 formats

FP8_FORMATS = ("e4m3", "e5m2")
# A recipe's format: one of FP8_FORMATS for every operand, or `hybrid` (e4m3 forward, e5m2 gradients).
RECIPE_FORMATS = (*FP8_FORMATS, "hybrid")
AMAX_ALGOS = ("max", "most_recent")
FP8_OPTIMIZERS = ("torchao", "blockwise")

# ---------------------------------------------------------------------------------------- RL objectives

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
KL_TYPES = ("k1", "k3")
TIS_LEVELS = ("token", "sequence")
# Calibrated clipping: which tokens set and receive the lower target, how the upper bound follows.
CALIB_POPULATIONS = ("all", "neg")
CALIB_UPPER_MODES = ("proportional", "quantile", "fixed")
CALIB_REFERENCE_MODES = ("shadow", "run", "static")
# Divergence detection (fp8rl.rl.stability): the kinds of divergence a run's summary names, and what a
# run does after the first one (`stability.on_divergence`).
DIVERGENCE_KINDS = ("non_finite", "entropy_spike", "entropy_collapse", "gibberish", "reward_collapse")
ON_DIVERGENCE = ("stop", "continue")


@dataclass(frozen=True)
class CalibReference:
    """Where calibrated clipping's target comes from, parsed once from the config string.

    `shadow`: the BF16 re-scoring of a sample of the step's sequences; `run`: per-step targets of the
    matching finished bf16 run; `static` with `q`: a fixed target quantile (config `static:<q>`).
    `str()` gives back the config spelling.
    """

    mode: str
    q: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in CALIB_REFERENCE_MODES:
            raise ValueError(
                f"calibration reference must be one of {', '.join(CALIB_REFERENCE_MODES)}, got {self.mode!r}"
            )
        if (self.mode == "static") != (self.q is not None):
            raise ValueError("calibration reference: a target q goes with mode 'static' and only with it")
        if self.q is not None and not 0.0 <= self.q < 1.0:
            raise ValueError(f"calibration reference 'static:<q>' needs 0 <= q < 1, got {self.q}")

    @classmethod
    def parse(cls, text: str | CalibReference) -> CalibReference:
        """`shadow`, `run` or `static:<q>`; ValueError naming the accepted forms otherwise."""
        if isinstance(text, CalibReference):
            return text
        if text in ("shadow", "run"):
            return cls(text)
        if isinstance(text, str) and text.startswith("static:"):
            try:
                q = float(text.split(":", 1)[1])
            except ValueError:
                q = -1.0
            if 0.0 <= q < 1.0:
                return cls("static", q)
        raise ValueError(f"reference must be 'shadow', 'run' or 'static:<q>' with 0 <= q < 1, got {text!r}")

    def __str__(self) -> str:
        return f"static:{self.q!r}" if self.mode == "static" else self.mode
