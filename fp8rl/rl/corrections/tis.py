"""`tis` and `seq_tis`: truncated importance sampling (Yao et al. 2025), `min(r_t, cap)` per token, or
`min(prod_t r_t, cap)` on every token of the sequence (`tis.level: sequence` makes `tis` the latter);
the weights and their statistics are fp8rl.rl.tis's."""

from __future__ import annotations

from fp8rl.rl.corrections._registry import (
    Correction,
    CorrectionInputs,
    CorrectionOptions,
    register_correction,
)
from fp8rl.rl.tis import tis_ratio, tis_stats, tis_weights


def truncated(inputs: CorrectionInputs, cap: float, level: str) -> Correction:
    i = inputs
    w = tis_weights(i.old_log_prob, i.rollout_log_prob, i.mask, cap=cap, level=level)
    raw = tis_ratio(i.old_log_prob, i.rollout_log_prob, i.mask, level=level)
    return Correction(w, None, tis_stats(raw, i.mask, cap=cap))


@register_correction("tis")
def token_tis(inputs: CorrectionInputs, options: CorrectionOptions) -> Correction:
    return truncated(inputs, options.cap, options.level)


@register_correction("seq_tis")
def sequence_tis(inputs: CorrectionInputs, options: CorrectionOptions) -> Correction:
    return truncated(inputs, options.cap, "sequence")
