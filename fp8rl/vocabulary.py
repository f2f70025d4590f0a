"""The project's names, defined once: config values, run ids, metric keys and tables all use these.

Lowest floor: imports nothing from fp8rl, so the config, the FP8 numerics (`fp8rl.fp8`), the RL
objectives (`fp8rl.rl`), the DAG's run-id pattern and the report all import their vocabulary from here.
The names of the mismatch corrections and the FP8 recipes are read from the file names of their
modules (fp8rl/rl/corrections/, fp8rl/fp8/recipes/; never imported here, so no name needs torch): a new
one is its module, registered where it is defined (CONTRIBUTING.md). A tier is no name here: a config
names its own.
docs/architecture.md ("Names") is the user-facing description.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# ------------------------------------------------------------------------------------------ the matrix

# How the math libraries pick kernels (fp8rl.numerics): one pinned path, or the machine's best.
NUMERICS_MODES = ("reproducible", "fast")
# The variable that forces the FP8 GEMM path (fp8rl.fp8.backend.gemm_backend); run provenance records it
# (fp8rl.numerics.state) because the two paths give different numbers in every numerics mode.
FP8_BACKEND_ENV = "FP8RL_FP8_BACKEND"

# Tiers are no list here: a config names its own tier (any path-safe name, fp8rl.config.tier_problem);
# the shipped tiers are the configs in config/.
ALGORITHMS = ("grpo", "dapo")
# The shipped variants; VARIANTS (below) adds each new correction's two.
_SHIPPED_VARIANTS = (
    "bf16", "fp8", "fp8_tis", "fp8_calib", "fp8_tis_calib",
    # the mismatch corrections other frameworks offer, each alone and with calibrated clipping, and FP16
    "fp8_seqtis", "fp8_seqtis_calib", "fp8_mis", "fp8_mis_calib", "fp8_icepop", "fp8_icepop_calib", "fp16",
    # the corrections of issue 56: score centering (alone and on TIS), QuRL's adaptive clip range, adaptive IcePop
    "fp8_scorecenter", "fp8_tis_scorecenter", "fp8_qurl", "fp8_icepop_adaptive",
    # bf16 whose rollout engine differs from its trainer as a real bf16 engine does (fp8rl.fp8.kernel_floor)
    "bf16_floor",
)  # fmt: skip
# Recipe-level FP8 granularities (a run id's granularity); `bf16` runs use NO_GRANULARITY. Each is one
# module of fp8rl/fp8/recipes/, named after it, that registers its recipe (fp8rl.fp8.recipe.register_recipe):
# the shipped ones in this order, then any other module found there by its file name (not imported:
# this floor never imports torch), so a new recipe is its one file plus its test.
RECIPES_DIR = Path(__file__).resolve().parent / "fp8" / "recipes"
_SHIPPED_GRANULARITIES = ("tensorwise", "delayed", "rowwise", "blockwise", "mxfp8")
GRANULARITIES = (
    *_SHIPPED_GRANULARITIES,
    *sorted(
        p.stem
        for p in RECIPES_DIR.glob("*.py")
        if not p.stem.startswith("_") and p.stem not in _SHIPPED_GRANULARITIES
    ),
)
NO_GRANULARITY = "none"
# A study tier's matrix may repeat every fp8 run under named FP8 conditions (format, noise dose, KV cache):
# the condition is then part of the run id, and bf16 runs have condition NO_CONDITION.
NO_CONDITION = "none"

# What a variant computes in: bf16 (the reference), FP8 per recipe, or FP16 with dynamic loss scaling
# (Qi et al. 2025: FP16 instead of a correction); fp16 runs have granularity `none`, like bf16.
PRECISIONS = ("bf16", "fp8", "fp16")
# The rollout/trainer mismatch corrections (fp8rl.rl.corrections), one per variant, with verl 0.9.1's
# `algorithm.rollout_correction` spelling where it has one:
#   none;
#   tis: token-level truncated IS, min(r_t, cap) (rollout_is=token);
#   seq_tis: sequence-level truncated IS, min(prod_t r_t, cap) on every token (rollout_is=sequence);
#   mis: masked IS (NeMo-RL's seq-mask-tis, slime's MIS): a sequence whose geometric-mean ratio leaves
#        the band `tis.mis` is dropped from the loss, the others keep token TIS weights
#        (rollout_rs=seq_mean_k1 with rollout_is=token);
#   icepop: the token's ratio r_t as its weight inside the band `tis.icepop` = [alpha, beta], 0 outside
#        (rollout_is=token with rollout_is_threshold "alpha_beta");
#   icepop_adaptive: IcePop whose band widens, past [alpha, beta], just enough that at most
#        `tis.icepop_mask_frac` / 2 of the step's tokens are masked on each side;
#   scorecenter: score centering (arXiv 2609.20807): an additive loss term that cancels the
#        sampler-expected score; tis_scorecenter: token TIS with the TIS-weighted score centred;
#   qurl: QuRL's adaptive clip range (arXiv 2602.13953): each update's clip range widened by the gap
#        between the FP8 ratio and its full-precision (BF16 shadow) reference.
# Each is one module of fp8rl.rl.corrections that registers itself under its name (tis.py and
# scorecenter.py register two each).
_SHIPPED_CORRECTIONS = (
    "none", "tis", "seq_tis", "mis", "icepop", "icepop_adaptive", "scorecenter", "tis_scorecenter", "qurl",
)  # fmt: skip
# A new correction is one file: a module of fp8rl/rl/corrections/ that registers its function under the
# module's own name (`@register_correction("<module name>")`, modules named `_*` are not corrections),
# plus its test. It is found here by its file name, not imported (this floor imports nothing, and never
# torch), and brings its correction name and two variants, `fp8_<name>` and `fp8_<name>_calib`
# (VARIANT_SPECS); fp8rl.rl.corrections checks at import that each module registered its name.
CORRECTIONS_DIR = Path(__file__).resolve().parent / "rl" / "corrections"
NEW_CORRECTIONS = tuple(
    sorted(
        p.stem
        for p in CORRECTIONS_DIR.glob("*.py")
        if not p.stem.startswith("_") and p.stem not in _SHIPPED_CORRECTIONS
    )
)
CORRECTIONS = (*_SHIPPED_CORRECTIONS, *NEW_CORRECTIONS)
# Default bands: IcePop's [0.5, 5] (the IcePop report's and verl's example). Masked IS: [0.97, 1.03], which
# drops about 15 % of the sequences of the smoke model at dose 1 (6-token answers, |d_t| ~ 0.02); verl's
# geometric-mean preset [0.999, 1.001] suits thousand-token responses and would drop nearly all of them.
ICEPOP_BAND = (0.5, 5.0)
MIS_BAND = (0.97, 1.03)
# Adaptive IcePop: the largest fraction of a step's tokens its band may mask (half on each side); the
# fixed band applies while it masks less.
ADAPTIVE_ICEPOP_MASK_FRAC = 0.02


@dataclass(frozen=True)
class VariantSpec:
    """What a variant name means: its precision, its mismatch correction, and calibrated clipping."""

    name: str
    precision: str
    correction: str
    calib: bool
    # the rollout copy computes with other bf16 kernels than the trainer (the `floor` section): a real
    # bf16 stack's trainer-vs-rollout mismatch, where `bf16` has none
    floor: bool = False

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS or self.correction not in CORRECTIONS:
            raise ValueError(f"variant {self.name}: unknown precision or correction")
        if self.floor and self.precision != "bf16":
            raise ValueError(f"variant {self.name}: a rollout floor is a bf16 variant's")

    @property
    def fp8(self) -> bool:
        return self.precision == "fp8"

    @property
    def fp16(self) -> bool:
        return self.precision == "fp16"

    @property
    def tis(self) -> bool:
        """Token-level TIS (the `*_tis` variants)."""
        return self.correction == "tis"

    @property
    def corrected(self) -> bool:
        """Any mismatch correction (IS weights and/or a mask)."""
        return self.correction != "none"


def _spec(
    name: str, precision: str, correction: str = "none", calib: bool = False, floor: bool = False
) -> VariantSpec:
    return VariantSpec(name, precision, correction, calib, floor)


_SHIPPED_SPECS = {
    "bf16": _spec("bf16", "bf16"),
    "fp8": _spec("fp8", "fp8"),
    "fp8_tis": _spec("fp8_tis", "fp8", "tis"),
    "fp8_calib": _spec("fp8_calib", "fp8", calib=True),
    "fp8_tis_calib": _spec("fp8_tis_calib", "fp8", "tis", calib=True),
    "fp8_seqtis": _spec("fp8_seqtis", "fp8", "seq_tis"),
    "fp8_seqtis_calib": _spec("fp8_seqtis_calib", "fp8", "seq_tis", calib=True),
    "fp8_mis": _spec("fp8_mis", "fp8", "mis"),
    "fp8_mis_calib": _spec("fp8_mis_calib", "fp8", "mis", calib=True),
    "fp8_icepop": _spec("fp8_icepop", "fp8", "icepop"),
    "fp8_icepop_calib": _spec("fp8_icepop_calib", "fp8", "icepop", calib=True),
    "fp16": _spec("fp16", "fp16"),
    "fp8_scorecenter": _spec("fp8_scorecenter", "fp8", "scorecenter"),
    "fp8_tis_scorecenter": _spec("fp8_tis_scorecenter", "fp8", "tis_scorecenter"),
    "fp8_qurl": _spec("fp8_qurl", "fp8", "qurl"),
    "fp8_icepop_adaptive": _spec("fp8_icepop_adaptive", "fp8", "icepop_adaptive"),
    "bf16_floor": _spec("bf16_floor", "bf16", floor=True),
}
assert tuple(_SHIPPED_SPECS) == _SHIPPED_VARIANTS


def _new_correction_specs() -> dict[str, VariantSpec]:
    """`fp8_<name>` and `fp8_<name>_calib` of every new correction (NEW_CORRECTIONS), in name order."""
    out = {}
    for name in NEW_CORRECTIONS:
        for variant, calib in ((f"fp8_{name}", False), (f"fp8_{name}_calib", True)):
            if variant in _SHIPPED_SPECS:
                raise ValueError(
                    f"{CORRECTIONS_DIR / name}.py: its variant {variant!r} is a shipped variant's name; "
                    "name the module otherwise"
                )
            out[variant] = _spec(variant, "fp8", name, calib=calib)
    return out


# Every variant: the shipped ones, then each new correction's two.
VARIANT_SPECS = {**_SHIPPED_SPECS, **_new_correction_specs()}
VARIANTS = tuple(VARIANT_SPECS)

# The rollout/trainer mismatch under the names other frameworks log (fp8rl.rl.corrections.
# mismatch_aliases; definitions in docs/interfaces.md), written beside `mismatch/kl_k1` and `kl_k3`.
MISMATCH_ALIASES = (
    "token_mult_prob_error",  # NeMo-RL
    "rollout_corr/kl",  # verl
    "train_rollout_logprob_abs_diff",  # slime
    "mismatch_kl",  # prime-rl
)


def granularities_of(variant: str) -> tuple[str, ...]:
    """The granularities a run of `variant` can have: `none` for bf16, the FP8 recipes otherwise."""
    return (NO_GRANULARITY,) if not VARIANT_SPECS[variant].fp8 else GRANULARITIES


# ----------------------------------------------------------------------------------------- metric keys
# The metrics.jsonl keys that more than one room reads (the trainer and the verl importer write them,
# the stability monitor, the heartbeat, the report and the studies read them); docs/interfaces.md lists all.
REWARD_MEAN = "reward/mean"  # mean verifier reward of the step's rollouts
ACC_MEAN = "acc/mean"  # fraction of the step's rollouts with a correct answer
RESP_LEN_MEAN = "resp_len/mean"  # mean response length (tokens)
GIBBERISH_RATE = "gibberish/rate"  # fraction of the step's rollouts flagged as gibberish
CLIP_LOW_NEG = "clip/low_neg"  # A<0 tokens with ratio r < L: the clipping calibrated clipping targets
CLIP_HIGH_POS = "clip/high_pos"  # A>0 tokens with r > U
CLIP_LOW_ALL = "clip/low_all"  # every token with r < L
CLIP_HIGH_ALL = "clip/high_all"  # every token with r > U
CLIP_DUAL = "clip/dual"  # A<0 tokens with r > clip_c (the dual clip)
# every clip/* metric of fp8rl.rl.clip_stats, in its order
CLIP_METRICS = (CLIP_LOW_NEG, CLIP_HIGH_POS, CLIP_DUAL, CLIP_LOW_ALL, CLIP_HIGH_ALL)
# the calibrated lower bound L of the step (mean over its updates). An update with a target q of 0 (the
# step's first, whose reference ratio is identically 1) clips nothing below: its L sits just under the
# smallest ratio, below low_range's floor when that ratio is (docs/clipping.md), so the mean may be too.
CALIB_LOW = "calib/low"
CALIB_HIGH = "calib/high"  # the calibrated upper bound U
# 1 when low_range's floor binds the update's calibrated lower bound (the bound that matches the target
# lies under it, so FP8 still clips more than the reference), 0 when not; step mean: the binding share
CALIB_FLOOR_BINDS = "calib/floor_binds"
MISMATCH_KL_K1 = "mismatch/kl_k1"  # rollout/trainer mismatch, k1 estimator
MISMATCH_KL_K3 = "mismatch/kl_k3"  # rollout/trainer mismatch, k3 estimator
# The mismatch in the units real stacks report (fp8rl.rl.mismatch), `{prefix}/{unit}` per step: k3 KL,
# mean |Δlogp|, tmpe (mean exp|Δlogp|, NeMo-RL's token_mult_prob_error) and the signed mean Δlogp, for
# the trainer vs the rollout engine (`mismatch/`) and the FP8 trainer vs its BF16 shadow (`shadow_mismatch/`).
MISMATCH_UNITS = ("kl_k3", "abs_dlogp", "tmpe", "dlogp")
MISMATCH_ROLLOUT = "mismatch"
MISMATCH_SHADOW = "shadow_mismatch"
# The variant every comparison is made against.
REFERENCE_VARIANT = "bf16"
# The trainer-vs-rollout per-token KL (k3) of a healthy real BF16 RL stack (NeMo-RL's CI reference value;
# public figures: 1-2e-3, fp8rl.quotes.real_stacks): what the mismatch calibration table divides by and
# the `bf16_floor` arm's default target (`floor.target_kl`).
REAL_BF16_KL = 2e-3

# ----------------------------------------------------------------------------------- tasks and evals
# Training tasks (`task.name`) by the backend that trains on them: the reference trainer builds its own
# (fp8rl.engine.data); verl trains on a hub dataset that `fp8rl data` converts (fp8rl.adapters.hub).
REFERENCE_TASKS = ("arithmetic", "word_problems", "longform", "gsm8k")
VERL_TASKS = ("dapo-math-17k",)
# The evaluation suites: `eval.lm_eval_tasks` -> eval/lm_eval.json, `eval.agent` -> eval/agent.json,
# `eval.heldout` -> eval/heldout.json (the bf16 sampler on held-out prompts, fp8rl.engine.heldout), and with
# `schedule.keep_every` too -> eval/heldout_history.json (the same at every kept checkpoint).
_SHIPPED_EVAL_SUITES = ("lm_eval", "agent", "heldout", "heldout_history")
# A new suite is one file: a module of fp8rl/evaluate/suites/ that registers its `EvalSuite` under the
# module's own name (modules named `_*` are helpers), plus its test; found here by its file name, not
# imported, and checked at import of fp8rl.evaluate.suites. Its result file is eval/<name>.json.
EVAL_SUITES_DIR = Path(__file__).resolve().parent / "evaluate" / "suites"
EVAL_SUITES = (
    *_SHIPPED_EVAL_SUITES,
    *sorted(
        p.stem
        for p in EVAL_SUITES_DIR.glob("*.py")
        if not p.stem.startswith("_") and p.stem not in _SHIPPED_EVAL_SUITES
    ),
)
# The held-out endpoint's metrics (eval/heldout.json, task `heldout`) and the tasks it can draw held-out
# prompts for (those with a generator beside their train and test splits).
HELDOUT_METRICS = ("greedy_acc", "sampled_reward", "sampled_format")
HELDOUT_TASKS = ("arithmetic", "word_problems", "longform")
# lm-eval's own tasks a config may name beside the local task YAMLs (evals/): the ones whose data
# `fp8rl fetch data` snapshots for an offline compute node (fp8rl.adapters.hub.EVAL_DATASETS).
LM_EVAL_TASKS = ("gsm8k", "math500", "aime24", "aime25")

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
