"""Adaptive IcePop inside verl: the `fp8rl_icepop_adaptive` policy loss, registered on import (verl_loss
imports this module, so every Ray worker that loads fp8rl's losses has it).

verl 0.9.1's rollout correction takes a fixed IcePop band; adaptive IcePop sets its band from the ratios
(fp8rl.rl.corrections.icepop_adaptive). The run sets verl's `rollout_is: token` with a threshold that
truncates nothing (fp8rl.adapters.verl_corrections `RAW_RATIO_THRESHOLD`), so `rollout_is_weights` are
the token ratios `exp(old_log_prob - rollout_log_prob)`, 0 at padding, computed as the reference
trainer computes them (log-ratio clamped at +-20, then exp); this loss applies fp8rl's adaptive-IcePop
weights to them (`adaptive_icepop_from_ratios`, the function the reference trainer's correction uses)
and hands them to the same `policy_loss` as `fp8rl_clip`.

The band is set from the ratios the loss sees: one micro-batch's, where the reference trainer sets it
from the whole step's (docs/paper_deviations.md). The band's start and largest masked fraction come from
the loss spec's `icepop_adaptive` entry (verl_corrections.correction_loss_spec). Its `icepop/*` and
`tis/*` metrics are not logged on this path (verl's `rollout_corr/*` describe the raw ratios).
"""

from __future__ import annotations

import torch

from fp8rl.adapters import verl_policy
from fp8rl.rl.corrections.icepop_adaptive import adaptive_icepop_from_ratios

LOSS_NAME = "fp8rl_icepop_adaptive"


def _options() -> tuple[tuple[float, float], float]:
    entry = verl_policy.load_spec().get("icepop_adaptive")
    if not entry:
        raise RuntimeError(
            f"{LOSS_NAME}: no adaptive IcePop options; set {verl_policy.SPEC_ENV} to the run's verl_loss.json "
            "(fp8rl verl train writes it)"
        )
    lo, hi = entry["band"]
    return (float(lo), float(hi)), float(entry["mask_frac"])


def weights(rollout_is_weights: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Adaptive IcePop's weights of one micro-batch from verl's untruncated ratios (module docstring)."""
    band, mask_frac = _options()
    w, _ = adaptive_icepop_from_ratios(
        rollout_is_weights, response_mask.bool(), band=band, mask_frac=mask_frac
    )
    return w


def _weights(call: verl_policy.LossCall) -> torch.Tensor:
    return weights(call.rollout_is_weights, call.response_mask)


fp8rl_icepop_adaptive_loss = verl_policy.verl_policy_loss(
    LOSS_NAME,
    "PPO-clip with fixed bounds through `fp8rl.rl.policy_loss`, the tokens weighted by adaptive IcePop "
    "(fp8rl.adapters.verl_icepop).",
    weights_of=_weights,
    needs_ratios="adaptive IcePop sets its band from them",
)
