"""The rollout/trainer mismatch under the names other frameworks log (not a correction: a diagnostic
every run writes beside `mismatch/*`)."""

from __future__ import annotations

import torch

from fp8rl.rl._checks import masked_mean
from fp8rl.rl.diagnostics import masked_log_ratio


def mismatch_aliases(
    trainer_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """The rollout/trainer mismatch under the names other frameworks log (vocabulary `MISMATCH_ALIASES`),
    each with its framework's definition, `d_t = trainer_t - rollout_t` over valid tokens:

    - `token_mult_prob_error` (NeMo-RL): token mean of `exp(|d_t|)` (1 when they agree);
    - `rollout_corr/kl` (verl): token mean of `-d_t` (k1 of KL(pi_rollout || pi_trainer); = mismatch/kl_k1);
    - `train_rollout_logprob_abs_diff` (slime): mean over sequences of each one's token mean of `|d_t|`;
    - `mismatch_kl` (prime-rl): token mean of `exp(d_t) - d_t - 1` (k3; = mismatch/kl_k3).
    Empty when there is no valid token."""
    found = masked_log_ratio("mismatch_aliases", trainer_log_prob, rollout_log_prob, mask)
    if found is None:
        return {}
    d, m = found
    with torch.no_grad():
        rows = m.any(dim=-1)
        per_seq = d.abs().sum(dim=-1)[rows] / m.sum(dim=-1)[rows]
        return {
            "token_mult_prob_error": float(masked_mean(torch.exp(d.abs()), m)),
            "rollout_corr/kl": float(masked_mean(-d, m)),
            "train_rollout_logprob_abs_diff": float(per_seq.mean()),
            "mismatch_kl": float(masked_mean(torch.expm1(d) - d, m)),
        }
