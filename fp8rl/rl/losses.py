"""PPO-clip policy loss with separate/explicit bounds, dual clip, IS weights, KL and entropy terms.

Semantics follow verl's `compute_policy_loss_vanilla`, `agg_loss` and `kl_penalty`
(verl/trainer/ppo/core_algos.py), with two deliberate differences that only matter where verl returns
NaN: padding never reaches the loss or its gradient (it is replaced before any arithmetic), and a
sequence with no valid token is left out of the sequence mean instead of dividing 0 by 0. An all-zero
mask gives a loss of exactly 0 that still backpropagates (zero gradients).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fp8rl.rl._checks import (
    LOG_RATIO_CLAMP,
    check_finite,
    check_mask,
    check_same_shape,
    masked_fill_padding,
    masked_mean,
    per_token,
)
from fp8rl.rl.bounds import ClipBounds
from fp8rl.rl.diagnostics import clip_stats
from fp8rl.vocabulary import KL_TYPES, LOSS_AGG_MODES


def agg_loss(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean") -> torch.Tensor:
    """Aggregate a per-token loss [B, T] into a scalar, as verl's `agg_loss`.

    `token-mean`: mean over all valid tokens of the batch. `seq-mean-token-mean`: each sequence's mean
    over its valid tokens, then the mean over sequences. `seq-mean-token-sum`: each sequence's sum, then
    the mean over sequences. Sequences without a valid token are not counted; with no valid token at all
    the result is 0 (still attached to the graph).
    """
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"agg_loss: unknown loss_agg_mode {mode!r}; allowed: {', '.join(LOSS_AGG_MODES)}")
    m = check_mask(mask, "agg_loss", "mask")
    check_same_shape("agg_loss", "mask", m, loss_mat=loss_mat)
    x = masked_fill_padding(loss_mat, m)
    n_tok = m.sum()
    if int(n_tok) == 0:
        return x.sum() * 0.0
    if mode == "token-mean":
        return x.sum() / n_tok
    row_n = m.sum(dim=-1)
    rows = row_n > 0
    row_sum = x.sum(dim=-1)
    row_val = row_sum / row_n.clamp(min=1) if mode == "seq-mean-token-mean" else row_sum
    return row_val[rows].mean()


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_type: str = "k3") -> torch.Tensor:
    """Per-token KL estimate to a reference policy (Schulman's estimators, as verl's `kl_penalty`).

    `k1`: `log_prob - ref_log_prob`. `k3` (verl's `low_var_kl`): with `d = ref - log_prob` clamped to
    +-20, `exp(d) - d - 1`, clamped to [-10, 10]; non-negative and unbiased for KL(pi || ref).
    """
    if kl_type == "k1":
        return log_prob - ref_log_prob
    if kl_type == "k3":
        d = torch.clamp(ref_log_prob - log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        return torch.clamp(torch.exp(d) - d - 1.0, -10.0, 10.0)
    raise ValueError(f"kl_penalty: unknown kl_type {kl_type!r}; allowed: {', '.join(KL_TYPES)}")


@dataclass(frozen=True)
class LossTerms:
    """The policy loss's settings a run fixes once (from its algorithm config, `LossTerms.from_algo`):
    the dual-clip constant, the aggregation, the KL and entropy terms. Checked here, when made, not on
    every `policy_loss` call."""

    clip_c: float | None = None  # dual clip for A < 0 tokens (> 1), None: off
    loss_agg_mode: str = "token-mean"
    kl_coef: float = 0.0
    kl_type: str = "k3"
    entropy_coef: float = 0.0

    def __post_init__(self) -> None:
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ValueError(
                f"policy_loss: unknown loss_agg_mode {self.loss_agg_mode!r}; allowed: {', '.join(LOSS_AGG_MODES)}"
            )
        if self.clip_c is not None and self.clip_c <= 1.0:
            raise ValueError(f"policy_loss: clip_c (dual clip) must be > 1, got {self.clip_c}")
        if self.kl_coef < 0 or self.entropy_coef < 0:
            raise ValueError(
                f"policy_loss: kl_coef and entropy_coef must be >= 0, got {self.kl_coef}, {self.entropy_coef}"
            )
        if self.kl_type not in KL_TYPES:
            raise ValueError(f"policy_loss: unknown kl_type {self.kl_type!r}; allowed: {', '.join(KL_TYPES)}")

    @classmethod
    def from_algo(cls, algo) -> LossTerms:
        """The terms of an algorithm config (fp8rl.config.algorithms: GRPO, DAPO)."""
        return cls(algo.clip_c, algo.loss_agg_mode, algo.kl_coef, algo.kl_type, algo.entropy_coef)


def policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    bounds: ClipBounds,
    terms: LossTerms = LossTerms(),
    *,
    is_weights: torch.Tensor | None = None,
    ref_log_prob: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    check_values: bool = True,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip loss of the current policy; returns `(loss, metrics)`.

    Per token, with `r = exp(clamp(log_prob - old_log_prob, -20, 20))` and `(L, U) = bounds`
    (`ClipBounds.fixed(clip_low, clip_high)` = (1 - clip_low, 1 + clip_high) for PPO's fixed interval,
    or calibrated ones): `max(-A r, -A clip(r, L, U))`; for A < 0 and `terms.clip_c` given, that is
    capped at `-A clip_c` (dual clip). `is_weights` [B, T] (detached) multiply the per-token loss; the
    result is aggregated with `terms.loss_agg_mode`. With `kl_coef > 0`, `kl_coef * agg(kl_penalty(
    log_prob, ref_log_prob, kl_type))` is added; with `entropy` [B, T] and `entropy_coef > 0`,
    `entropy_coef * agg(entropy)` is subtracted (an entropy bonus), as verl's actor does.

    `advantages` is [B] (broadcast over tokens) or [B, T]. Shapes are always checked; with
    `check_values` the mask must hold only 0/1 and non-finite values at valid tokens raise ValueError
    (each check reads the tensor back to the host: a caller that checks its log-probs itself and the
    loss after, as the reference trainer does, passes False). `metrics` (python floats): `loss/pg`,
    `loss/ppo_kl` (mean of old - new log-prob), `loss/tokens`, `loss/kl` and `loss/entropy` when those
    terms are present, plus the `clip/*` of `clip_stats` under `bounds`; with no valid token only
    `loss/tokens` (= 0).
    """
    fn = "policy_loss"
    if not isinstance(bounds, ClipBounds):
        raise TypeError(
            f"{fn}: bounds must be a ClipBounds (ClipBounds.fixed(clip_low, clip_high) for PPO's), "
            f"got {type(bounds).__name__}"
        )
    if check_values:
        m = check_mask(response_mask, fn)
    else:
        m = response_mask if response_mask.dtype == torch.bool else response_mask != 0
    check_same_shape(
        fn, "response_mask", m, log_prob=log_prob, old_log_prob=old_log_prob, is_weights=is_weights,
        ref_log_prob=ref_log_prob, entropy=entropy,
    )  # fmt: skip
    if not isinstance(advantages, torch.Tensor):
        raise TypeError(f"{fn}: advantages must be a torch.Tensor")
    adv = per_token(fn, "advantages", advantages, m).detach()
    if terms.kl_coef > 0 and ref_log_prob is None:
        raise ValueError(f"{fn}: kl_coef > 0 needs ref_log_prob")
    if terms.entropy_coef > 0 and entropy is None:
        raise ValueError(f"{fn}: entropy_coef > 0 needs entropy")
    low, high = bounds
    if check_values:
        named = {"log_prob": log_prob, "old_log_prob": old_log_prob, "advantages": adv}
        named |= {"is_weights": is_weights, "ref_log_prob": ref_log_prob, "entropy": entropy}
        for name, t in named.items():
            if t is not None:
                check_finite(fn, name, t, m)

    n_tok = int(m.sum())
    lp = masked_fill_padding(log_prob, m)
    old = masked_fill_padding(old_log_prob.detach(), m)
    adv = masked_fill_padding(adv, m)
    log_ratio = torch.clamp(lp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)

    pg1 = -adv * ratio
    pg2 = -adv * torch.clamp(ratio, low, high)
    pg = torch.maximum(pg1, pg2)
    if terms.clip_c is not None:
        pg = torch.where(adv < 0, torch.minimum(pg, -adv * terms.clip_c), pg)
    if is_weights is not None:
        pg = pg * masked_fill_padding(is_weights.detach(), m)
    pg_loss = agg_loss(pg, m, terms.loss_agg_mode)
    loss = pg_loss
    if n_tok == 0:
        return loss, {"loss/tokens": 0.0}

    metrics: dict[str, float] = {"loss/pg": float(pg_loss.detach()), "loss/tokens": float(n_tok)}
    with torch.no_grad():
        metrics["loss/ppo_kl"] = float(masked_mean(-log_ratio, m))
    if ref_log_prob is not None and terms.kl_coef > 0:
        kl = kl_penalty(lp, masked_fill_padding(ref_log_prob.detach(), m), terms.kl_type)
        kl_loss = agg_loss(kl, m, terms.loss_agg_mode)
        loss = loss + terms.kl_coef * kl_loss
        metrics["loss/kl"] = float(kl_loss.detach())
    if entropy is not None:
        ent_loss = agg_loss(masked_fill_padding(entropy, m), m, terms.loss_agg_mode)
        if terms.entropy_coef > 0:
            loss = loss - terms.entropy_coef * ent_loss
        metrics["loss/entropy"] = float(ent_loss.detach())
    metrics.update(clip_stats(ratio.detach(), adv, m, low, high, clip_c=terms.clip_c))
    return loss, metrics
