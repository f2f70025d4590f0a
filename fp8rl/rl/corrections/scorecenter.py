"""`scorecenter` and `tis_scorecenter`: Score Centering (Marek & Ryabinin, arXiv 2609.20807).

At a prefix h the sampler q (the FP8 rollout engine) draws token a; the policy-gradient term
`A * s_a`, with the score `s_a = grad log pi_theta(a | h)`, has under q the mean `E_q[A] * mu + Cov_q(A, s)`,
`mu = sum_v q_v s_v`, which is not 0 when q differs from the trainer's policy: a persistent drift that
accumulates step after step, not variance. Score centering subtracts the sampler-expected score:

    loss_t += A_t * sum_v sg(c_v) * log pi_theta(v | h_t),   c_v = q_v * w_v

so that `-grad` of the token's loss is `A_t (w_a s_a - mu_w)`, `mu_w = sum_v q_v w_v s_v`: `w = 1` for
`scorecenter` (with no IS weight on the sampled token either), `w_v = min(pi_old(v) / q_v, cap)` for
`tis_scorecenter`, where the sampled token also gets its TIS weight. This is the additive term of
vime's `score_centering_correction` and of prime-rl's `score_centering_loss` (an IPO loss with
`loss_fn.score_centering`), over the full vocabulary: the exact form, which the reference trainer's
models afford (`Correction.centering`). The term is added unclipped to fp8rl's PPO-clip loss and
aggregated as the policy-gradient loss is; on the step's first update (pi_theta = pi_old) its gradient is
exactly the paper's; on later updates the coefficient stays the one computed from pi_old and q.

q is the distribution the sampler drew each token from, recorded by the KV-cached FP8 rollout as it
sampled (fp8rl.engine.sampler `generate(..., keep_distributions=True)`, full vocabulary, under the
temperature and before the top-p cut, as the rollout log-probs are), so it carries every source of the
rollout/trainer mismatch the log-probs carry: the rollout copy's weights and numerics and its sampling
path (a prefill, then one-token decode steps against its KV cache).

Metrics: `sc/mass` (token mean of `sum_v c_v`: 1 for `scorecenter`, the TIS-kept mass otherwise) and
`sc/tv` (token mean of the total variation `0.5 * sum_v |q_v - pi_old(v)|`: the size of the drift).
"""

from __future__ import annotations

import torch

from fp8rl.rl._checks import check_same_shape, masked_mean
from fp8rl.rl.corrections._registry import (
    Correction,
    CorrectionInputs,
    CorrectionOptions,
    register_correction,
)
from fp8rl.rl.corrections.tis import truncated
from fp8rl.rl.losses import agg_loss


def centering_coefficients(
    old_logits: torch.Tensor, rollout_logits: torch.Tensor, mask: torch.Tensor, *, cap: float | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """`(c [B, T, V], metrics)`: `c_v = q_v` (`cap` None) or `q_v * min(pi_old(v) / q_v, cap) =
    min(pi_old(v), cap * q_v)`, 0 at padding; detached. The logits are after the temperature."""
    fn = "centering_coefficients"
    if old_logits.shape != rollout_logits.shape or old_logits.shape[:-1] != mask.shape:
        raise ValueError(
            f"{fn}: old_logits {tuple(old_logits.shape)} and rollout_logits {tuple(rollout_logits.shape)} "
            f"must be [B, T, V] over the mask {tuple(mask.shape)}"
        )
    with torch.no_grad():
        q = torch.softmax(rollout_logits.detach().double(), dim=-1)
        p = torch.softmax(old_logits.detach().double(), dim=-1)
        c = q if cap is None else torch.minimum(p, cap * q)
        c = torch.where(mask[..., None], c, torch.zeros_like(c))
        metrics = {}
        if int(mask.sum()):
            metrics = {
                "sc/mass": float(masked_mean(c.sum(-1), mask)),
                "sc/tv": float(masked_mean(0.5 * (q - p).abs().sum(-1), mask)),
            }
    return c.to(rollout_logits.dtype), metrics


def centering_loss(
    logits: torch.Tensor,
    coef: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
) -> torch.Tensor:
    """The additive term `agg_t(A_t * sum_v coef_v * log softmax(logits)_v)` (module docstring), with
    gradient through `logits` [B, T, V] only; `advantages` [B] or [B, T]."""
    check_same_shape("centering_loss", "logits", logits, coef=coef)
    adv = advantages.detach()
    if adv.dim() == 1:
        adv = adv[:, None].expand(mask.shape)
    per_token = adv * (coef.detach() * torch.log_softmax(logits, dim=-1)).sum(-1)
    return agg_loss(per_token, mask, loss_agg_mode)


@register_correction("scorecenter", needs_distributions=True)
def scorecenter(inputs: CorrectionInputs, options: CorrectionOptions) -> Correction:
    c, metrics = centering_coefficients(inputs.old_logits, inputs.rollout_logits, inputs.mask)
    return Correction(None, None, metrics, c)


@register_correction("tis_scorecenter", needs_distributions=True)
def tis_scorecenter(inputs: CorrectionInputs, options: CorrectionOptions) -> Correction:
    tis = truncated(inputs, options.cap, "token")
    c, metrics = centering_coefficients(
        inputs.old_logits, inputs.rollout_logits, inputs.mask, cap=options.cap
    )
    return Correction(tis.weights, None, {**tis.metrics, **metrics}, c)
