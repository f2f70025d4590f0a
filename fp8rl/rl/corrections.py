"""The rollout/trainer mismatch corrections side by side, and the mismatch under other frameworks' names.

The rollout engine samples from pi_rollout, the trainer scores the same tokens as pi_old; with the
per-token log-ratio `d_t = old_t - rollout_t` and `r_t = exp(d_t)`, each correction (vocabulary
`CORRECTIONS`) gives detached per-token weights that multiply the PPO loss and/or a per-sequence keep
mask that removes sequences from the loss (and from its token counts), as verl's
`algorithm.rollout_correction` does with `rollout_is_weights` and the rejection-sampled response mask:

- `tis`: `min(r_t, cap)` per token (Yao et al. 2025; `tis.level: sequence` makes it `seq_tis`);
- `seq_tis`: `min(prod_t r_t, cap)`, one weight per sequence on all its tokens;
- `mis` (masked IS; NeMo-RL's seq-mask-tis, slime's MIS): a sequence whose geometric-mean ratio
  `exp(mean_t d_t)` lies outside the band `[low, high]` is dropped; the kept ones get `min(r_t, cap)`;
- `icepop` (IcePop): `r_t` inside the band `[alpha, beta]`, 0 outside (the token drops out of the gradient
  but stays in the token count).

Calibrated clipping composes with each: it moves the clip bounds, the correction weights the loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fp8rl.rl._checks import LOG_RATIO_CLAMP, check_finite, check_mask, check_same_shape, masked_mean
from fp8rl.rl.diagnostics import masked_log_ratio
from fp8rl.rl.tis import tis_ratio, tis_stats, tis_weights
from fp8rl.vocabulary import CORRECTIONS, ICEPOP_BAND, MIS_BAND, TIS_LEVELS


@dataclass(frozen=True)
class Correction:
    """One batch's correction: `weights` [B, T] (detached, 0 at padding) multiply the per-token loss,
    `keep` [B] (bool) says which sequences stay in the loss; either is None when the correction has none."""

    weights: torch.Tensor | None
    keep: torch.Tensor | None
    metrics: dict[str, float]


def _check_band(band: tuple[float, float], fn: str, *, positive: bool) -> tuple[float, float]:
    lo, hi = float(band[0]), float(band[1])
    if not (0.0 < lo < hi if positive else 0.0 <= lo < hi):
        raise ValueError(
            f"{fn}: band must be (low, high) with 0 {'<' if positive else '<='} low < high, got {band}"
        )
    return lo, hi


def _log_ratio(old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor, fn: str):
    m = check_mask(mask, fn)
    check_same_shape(fn, "response_mask", m, old_log_prob=old, rollout_log_prob=rollout)
    check_finite(fn, "old_log_prob", old, m)
    check_finite(fn, "rollout_log_prob", rollout, m)
    d = torch.where(m, old.detach() - rollout.detach(), torch.zeros_like(old))
    return d, m


def icepop_weights(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    band: tuple[float, float] = ICEPOP_BAND,
) -> torch.Tensor:
    """IcePop's weights [B, T]: `r_t = exp(old - rollout)` where `alpha <= r_t <= beta`, else 0; 0 at
    padding. Detached."""
    fn = "icepop_weights"
    lo, hi = _check_band(band, fn, positive=False)
    d, m = _log_ratio(old_log_prob, rollout_log_prob, response_mask, fn)
    r = torch.exp(d.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return torch.where(m & (r >= lo) & (r <= hi), r, torch.zeros_like(r))


def mis_keep(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    band: tuple[float, float] = MIS_BAND,
) -> torch.Tensor:
    """Masked IS's sequence mask [B] (bool): True where the geometric-mean ratio `exp(mean_t d_t)` over the
    sequence's valid tokens lies in `[low, high]` (compared in log space); a sequence without valid
    tokens is kept."""
    fn = "mis_keep"
    lo, hi = _check_band(band, fn, positive=True)
    d, m = _log_ratio(old_log_prob, rollout_log_prob, response_mask, fn)
    n = m.sum(dim=-1)
    mean_d = d.sum(dim=-1) / n.clamp(min=1)
    inside = (mean_d >= math.log(lo)) & (mean_d <= math.log(hi))
    return inside | (n == 0)


def rollout_correction(
    kind: str,
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    cap: float = 2.0,
    level: str = "token",
    icepop: tuple[float, float] = ICEPOP_BAND,
    mis: tuple[float, float] = MIS_BAND,
) -> Correction:
    """The correction `kind` (vocabulary `CORRECTIONS`) of one batch, with its metrics: `tis/mean` (mean
    weight over valid tokens, after masking), `tis/clipped` (fraction of valid tokens whose weight was
    truncated at `cap`), `tis/masked` (fraction of valid tokens zeroed or dropped: `icepop`, `mis`) and
    `tis/seq_masked` (fraction of sequences dropped: `mis`). `level` applies to `tis` only."""
    fn = "rollout_correction"
    if kind not in CORRECTIONS:
        raise ValueError(f"{fn}: unknown correction {kind!r}; allowed: {', '.join(CORRECTIONS)}")
    if level not in TIS_LEVELS:
        raise ValueError(f"{fn}: unknown level {level!r}; allowed: {', '.join(TIS_LEVELS)}")
    m = check_mask(response_mask, fn)
    if kind == "none":
        return Correction(None, None, {})
    if kind in ("tis", "seq_tis"):
        lvl = "sequence" if kind == "seq_tis" else level
        w = tis_weights(old_log_prob, rollout_log_prob, m, cap=cap, level=lvl)
        raw = tis_ratio(old_log_prob, rollout_log_prob, m, level=lvl)
        return Correction(w, None, tis_stats(raw, m, cap=cap))
    if kind == "icepop":
        w = icepop_weights(old_log_prob, rollout_log_prob, m, band=icepop)
        metrics = {}
        if int(m.sum()):
            metrics = {
                "tis/mean": float(masked_mean(w, m)),
                "tis/masked": float(masked_mean((w == 0).float(), m)),
            }
        return Correction(w, None, metrics)
    keep = mis_keep(old_log_prob, rollout_log_prob, m, band=mis)
    w = tis_weights(old_log_prob, rollout_log_prob, m, cap=cap, level="token")
    kept = m & keep[:, None]
    metrics = {}
    if int(m.sum()):
        metrics = (
            tis_stats(tis_ratio(old_log_prob, rollout_log_prob, kept), kept, cap=cap)
            if int(kept.sum())
            else {}
        )
        metrics["tis/masked"] = float(masked_mean((~kept).float(), m))
        rows = m.any(dim=-1)
        metrics["tis/seq_masked"] = float((~keep[rows]).float().mean())
    return Correction(torch.where(kept, w, torch.zeros_like(w)), keep, metrics)


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
