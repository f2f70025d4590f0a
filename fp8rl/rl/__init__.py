"""RL objectives (docs/architecture.md#fp8-numerics-contract): advantages, policy losses, TIS, calibrated clipping, diagnostics.

Pure torch functions with no trainer state (plus a small stateful calibrator and stability monitor), so the
reference trainer and the verl adapter compute exactly the same objective. Never imports `fp8rl.fp8`.
"""

from fp8rl.rl._checks import LOG_RATIO_CLAMP, masked_ratio
from fp8rl.rl.advantages import dynamic_sampling_mask, grpo_advantages, overlong_penalty
from fp8rl.rl.bounds import ClipBounds
from fp8rl.rl.calibration import (
    CalibOptions,
    Calibrator,
    ReferenceCounts,
    bounds_from_quantiles,
    calibrated_bounds,
    reference_counts,
)
from fp8rl.rl.corrections import Correction, icepop_weights, mis_keep, mismatch_aliases, rollout_correction
from fp8rl.rl.diagnostics import clip_stats, mismatch_kl, phantom_low_neg, ratio_quantiles
from fp8rl.rl.entropy import entropy_from_logits
from fp8rl.rl.gibberish import GibberishRules, gibberish_rate, gibberish_reason
from fp8rl.rl.losses import LossTerms, agg_loss, kl_penalty, policy_loss
from fp8rl.rl.ratio_hist import RatioHistogram
from fp8rl.rl.stability import DIVERGENCE_KINDS, Divergence, StabilityMonitor
from fp8rl.rl.tis import tis_ratio, tis_stats, tis_weights

__all__ = [
    "CalibOptions",
    "LOG_RATIO_CLAMP",
    "DIVERGENCE_KINDS",
    "Divergence",
    "StabilityMonitor",
    "GibberishRules",
    "RatioHistogram",
    "entropy_from_logits",
    "gibberish_rate",
    "gibberish_reason",
    "Calibrator",
    "ClipBounds",
    "Correction",
    "icepop_weights",
    "mis_keep",
    "mismatch_aliases",
    "rollout_correction",
    "bounds_from_quantiles",
    "calibrated_bounds",
    "ReferenceCounts",
    "reference_counts",
    "LossTerms",
    "agg_loss",
    "clip_stats",
    "dynamic_sampling_mask",
    "grpo_advantages",
    "kl_penalty",
    "mismatch_kl",
    "overlong_penalty",
    "phantom_low_neg",
    "policy_loss",
    "masked_ratio",
    "ratio_quantiles",
    "tis_ratio",
    "tis_stats",
    "tis_weights",
]
