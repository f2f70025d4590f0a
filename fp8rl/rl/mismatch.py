"""Mismatch between two scorings of the same sampled tokens, in the units real RL stacks report.

With `d_t = a_t - b_t` the per-token log-prob difference over the valid tokens (a: the trainer, b: the
rollout engine, or a: the FP8 trainer, b: its BF16 shadow), four token means:

- `kl_k3`: `mean(exp(d) - d - 1)`, Schulman's k3 estimate of KL(pi_b || pi_a) on pi_b's samples (>= 0
  per token; the same value as `mismatch/kl_k3` for the trainer against the rollout);
- `abs_dlogp`: `mean(|d|)`, the figure NeMo-RL and vime quote as |Δlogp| (≈ 0.01 for a healthy BF16
  trainer against a BF16 rollout engine);
- `tmpe`: `mean(exp(|d|))`, NeMo-RL's `token_mult_prob_error` (1 when the two agree; it calls < 1.03-1.05
  acceptable);
- `dlogp`: `mean(d)`, the signed bias (a systematic under- or over-confidence of one side).

For small d, KL ≈ E[d²]/2, so KL 1e-3 is an RMS Δlogp of about 0.045. docs/mismatch.md places each setting
of the CPU tiers beside the public real-stack figures.
"""

from __future__ import annotations

import torch

from fp8rl.rl._checks import masked_mean
from fp8rl.rl.diagnostics import masked_log_ratio
from fp8rl.vocabulary import MISMATCH_ROLLOUT as ROLLOUT
from fp8rl.vocabulary import MISMATCH_SHADOW as SHADOW
from fp8rl.vocabulary import MISMATCH_UNITS as UNITS

__all__ = ["ROLLOUT", "SHADOW", "UNITS", "mismatch_units"]


def mismatch_units(
    a_log_prob: torch.Tensor, b_log_prob: torch.Tensor, mask: torch.Tensor, prefix: str
) -> dict:
    """`{prefix}/{unit}` for each of `UNITS` (module docstring), `d = a - b` over the valid tokens of
    `mask` (clamped to ±20, as every log-ratio here); empty when no token is valid. Arguments are [B, T]."""
    found = masked_log_ratio("mismatch_units", a_log_prob, b_log_prob, mask)
    if found is None:
        return {}
    d, m = found
    with torch.no_grad():
        values = {
            "kl_k3": masked_mean(torch.expm1(d) - d, m),
            "abs_dlogp": masked_mean(d.abs(), m),
            "tmpe": masked_mean(torch.exp(d.abs()), m),
            "dlogp": masked_mean(d, m),
        }
    return {f"{prefix}/{k}": float(values[k]) for k in UNITS}
