"""Trust-region diagnostics of docs/architecture.md#metrics: clip fractions, ratio quantiles, rollout/trainer mismatch
KL, phantom clipping.

Each function returns a dict of python floats keyed by the metric names of docs/architecture.md#metrics. A metric whose
population is empty (no valid token, no negative-advantage token, no dual clip configured) is absent
from the dict, never 0.

Denominators, so that a BF16 run's metrics are directly the targets of calibrated clipping (docs/architecture.md#calibrated-clipping):
`clip/low_neg` and `clip/dual` count among valid A<0 tokens, `clip/high_pos` among valid A>0 tokens,
`clip/low_all` and `clip/high_all` among all valid tokens.
"""

from __future__ import annotations

import torch

from fp8rl.rl._checks import (
    LOG_RATIO_CLAMP,
    check_finite,
    check_mask,
    check_same_shape,
    masked_mean,
    per_token,
)
from fp8rl.vocabulary import (
    CLIP_DUAL,
    CLIP_HIGH_ALL,
    CLIP_HIGH_POS,
    CLIP_LOW_ALL,
    CLIP_LOW_NEG,
    MISMATCH_KL_K1,
    MISMATCH_KL_K3,
)


def _frac(hit: torch.Tensor, population: torch.Tensor) -> float | None:
    n = int(population.sum())
    return None if n == 0 else int((hit & population).sum()) / n


def _put(out: dict[str, float], name: str, value: float | None) -> None:
    if value is not None:
        out[name] = float(value)


def clip_stats(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    low: float | torch.Tensor,
    high: float | torch.Tensor,
    *,
    clip_c: float | None = None,
) -> dict[str, float]:
    """Fractions of tokens clipped by the bounds (strict inequalities: r < L, r > U, r > clip_c).

    `clip/low_neg`: A<0 tokens with r < L, i.e. the negative-advantage tokens whose gradient PPO-clip
    zeroes, among valid A<0 tokens. `clip/high_pos`: A>0 tokens with r > U among valid A>0 tokens.
    `clip/dual`: A<0 tokens with r > clip_c among valid A<0 tokens (only when `clip_c` is given).
    `clip/low_all` / `clip/high_all`: tokens with r < L / r > U among all valid tokens (`clip/high_all`
    is an addition to the core metrics: the upper target of `calib.upper: quantile` with a `run` reference).
    """
    fn = "clip_stats"
    m = check_mask(response_mask, fn)
    check_same_shape(fn, "response_mask", m, ratio=ratio)
    adv = per_token(fn, "advantages", advantages, m)
    with torch.no_grad():
        r = ratio.detach()
        check_finite(fn, "ratio", r, m)
        low_f, high_f = float(low), float(high)
        neg = m & (adv < 0)
        pos = m & (adv > 0)
        out: dict[str, float] = {}
        _put(out, CLIP_LOW_NEG, _frac(r < low_f, neg))
        _put(out, CLIP_HIGH_POS, _frac(r > high_f, pos))
        if clip_c is not None:
            _put(out, CLIP_DUAL, _frac(r > float(clip_c), neg))
        _put(out, CLIP_LOW_ALL, _frac(r < low_f, m))
        _put(out, CLIP_HIGH_ALL, _frac(r > high_f, m))
    return out


def ratio_quantiles(ratio: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """`ratio/p01`, `ratio/p50`, `ratio/p99`: quantiles (linear interpolation) of r over valid tokens."""
    m = check_mask(mask, "ratio_quantiles", "mask")
    check_same_shape("ratio_quantiles", "mask", m, ratio=ratio)
    vals = ratio.detach()[m].to(torch.float64)
    if vals.numel() == 0:
        return {}
    check_finite("ratio_quantiles", "ratio", vals)
    s, _ = torch.sort(vals)
    return {
        name: float(sorted_quantile(s, q))
        for name, q in (("ratio/p01", 0.01), ("ratio/p50", 0.5), ("ratio/p99", 0.99))
    }


def sorted_quantile(sorted_vals: torch.Tensor, q: float) -> torch.Tensor:
    """Quantile `q` of an ascending 1-D tensor with linear interpolation (`torch.quantile`'s default),
    without `torch.quantile`'s input-size limit."""
    n = sorted_vals.numel()
    if n == 0:
        raise ValueError("sorted_quantile: empty input")
    pos = q * (n - 1)
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * frac


def masked_log_ratio(
    fn: str, trainer_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`(d, m)`: `d = trainer - rollout` in float64, 0 outside the 0/1 mask `m`, clamped to +-20; None
    when no token is valid. Checks shapes and finiteness, naming `fn` in its errors."""
    m = check_mask(mask, fn, "mask")
    check_same_shape(fn, "mask", m, trainer_log_prob=trainer_log_prob, rollout_log_prob=rollout_log_prob)
    if int(m.sum()) == 0:
        return None
    check_finite(fn, "trainer_log_prob", trainer_log_prob, m)
    check_finite(fn, "rollout_log_prob", rollout_log_prob, m)
    with torch.no_grad():
        d = (trainer_log_prob.detach() - rollout_log_prob.detach()).to(torch.float64)
        return torch.where(m, d, torch.zeros_like(d)).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP), m


def mismatch_kl(
    trainer_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """KL(pi_rollout || pi_trainer) estimated on the rollout's own samples, mean over valid tokens.

    With `d = trainer - rollout` (clamped to +-20): `mismatch/kl_k1 = mean(-d)` and
    `mismatch/kl_k3 = mean(exp(d) - d - 1)` (Schulman's k1 and k3 estimators; k3 is >= 0 per token).
    """
    found = masked_log_ratio("mismatch_kl", trainer_log_prob, rollout_log_prob, mask)
    if found is None:
        return {}
    d, m = found
    with torch.no_grad():
        return {
            MISMATCH_KL_K1: float(masked_mean(-d, m)),
            MISMATCH_KL_K3: float(masked_mean(torch.expm1(d) - d, m)),
        }


def phantom_low_neg(
    ratio: torch.Tensor,
    ref_ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    low: float | torch.Tensor,
    ref_low: float | torch.Tensor,
) -> dict[str, float]:
    """Paired lower-bound clipping of A<0 tokens, FP8 (`ratio < low`) against the BF16 reference
    (`ref_ratio < ref_low`), as fractions of the valid A<0 tokens of `mask` (pass the shadow subsample):

    - `phantom/low_neg`: clipped under FP8 but not under BF16: gradients lost to quantization noise;
    - `phantom/missed_neg`: clipped under BF16 but not under FP8: gradients FP8 keeps that BF16 zeroes.

    Their difference is the net excess clipping. Both absent when there is no valid A<0 token.
    """
    fn = "phantom_low_neg"
    m = check_mask(mask, fn, "mask")
    check_same_shape(fn, "mask", m, ratio=ratio, ref_ratio=ref_ratio)
    adv = per_token(fn, "advantages", advantages, m)
    check_finite(fn, "ratio", ratio, m)
    check_finite(fn, "ref_ratio", ref_ratio, m)
    with torch.no_grad():
        fp8_clips = ratio.detach() < float(low)
        bf16_clips = ref_ratio.detach() < float(ref_low)
        neg = m & (adv < 0)
        out: dict[str, float] = {}
        _put(out, "phantom/low_neg", _frac(fp8_clips & ~bf16_clips, neg))
        _put(out, "phantom/missed_neg", _frac(bf16_clips & ~fp8_clips, neg))
    return out
