"""The common part of fp8rl's policy losses inside verl: a registered loss is `verl_policy_loss(name, doc,
bounds_of=..., weights_of=...)`, one call per loss (fp8rl.adapters.verl_loss: `fp8rl_clip`,
`calibrated_clip`; verl_icepop: `fp8rl_icepop_adaptive`; verl_qurl: `fp8rl_qurl`).

verl's actor calls a registered policy loss as `fn(old_log_prob, log_prob, advantages, response_mask,
loss_agg_mode, config, rollout_is_weights)` and expects `(loss, metrics)`. Every loss here checks its
inputs (a NaN/inf at a valid token is a divergence: `check_finite_inputs`), takes the call as a named
record (`LossCall`), asks its `bounds_of` for the clip bounds (None: fixed, from verl's clip ratios) and
its `weights_of` for the per-token weights (default: verl's rollout-correction weights), and runs
`fp8rl.rl.policy_loss` (the reference trainer's function), rescaled from fp8rl's local aggregation to
verl's global one (`config.global_batch_info`). Its metrics are `LOSS_METRICS`, each as a weighted pair
(fp8rl.adapters.verl_update.fold), so every micro-batch logs the same keys.

The dual clip `clip_c` and each loss's options come from the JSON file named by `$FP8RL_VERL_LOSS`
(`load_spec`; fp8rl verl train writes it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from verl.trainer.ppo.core_algos import register_policy_loss

from fp8rl.adapters import verl_update
from fp8rl.adapters.verl_launch import DIVERGENCE_FILE
from fp8rl.adapters.verl_update import NonFiniteLoss
from fp8rl.rl import LOG_RATIO_CLAMP, ClipBounds, LossTerms, policy_loss, ratio_quantiles
from fp8rl.vocabulary import (
    CALIB_FLOOR_BINDS,
    CALIB_HIGH,
    CALIB_LOW,
    CLIP_DUAL,
    CLIP_HIGH_ALL,
    CLIP_HIGH_POS,
    CLIP_LOW_ALL,
    CLIP_LOW_NEG,
)

SPEC_ENV = "FP8RL_VERL_LOSS"

# Every metric the losses log, as a weighted pair on every micro-batch (verl_update.fold): name -> the
# population its value is a fraction or mean over (its weight), or None: one per micro-batch that has it.
LOSS_METRICS: dict[str, str | None] = {
    CLIP_LOW_NEG: "neg",
    CLIP_DUAL: "neg",
    CLIP_HIGH_POS: "pos",
    CLIP_LOW_ALL: "tokens",
    CLIP_HIGH_ALL: "tokens",
    "loss/ppo_kl": "tokens",
    "actor/ppo_kl": "tokens",
    "loss/pg": None,
    "ratio/p01": None,
    "ratio/p50": None,
    "ratio/p99": None,
    CALIB_LOW: None,
    CALIB_HIGH: None,
    "calib/target_q": None,
    "calib/target_q_high": None,
    CALIB_FLOOR_BINDS: None,
    "qurl/gap": None,
    "qurl/low": None,
    "qurl/high": None,
}
PLAIN_METRICS = ("loss/tokens",)  # logged by every micro-batch as it is


def check_finite_inputs(**tensors: torch.Tensor | None) -> None:
    """Record and raise a divergence (module docstring) when a tensor holds NaN/inf at a valid token
    (`response_mask`, a keyword argument, selects the tokens)."""
    mask = tensors.pop("response_mask").bool()
    bad = {}
    for name, t in tensors.items():
        if t is not None:
            n = int((~torch.isfinite(t.detach()) & (mask if t.dim() == mask.dim() else mask.any(-1))).sum())
            if n:
                bad[name] = n
    if not bad:
        return
    what = ", ".join(f"{name} ({n} tokens)" for name, n in bad.items())
    reason = f"non-finite {what} in the policy loss"
    path = os.environ.get(SPEC_ENV)
    if path:
        from fp8rl.io import atomic_write_json

        atomic_write_json(
            os.path.join(os.path.dirname(path), DIVERGENCE_FILE), {"kind": "non_finite", "what": reason}
        )
    raise NonFiniteLoss(f"fp8rl: {reason}: the run diverged" + (f" (recorded beside {path})" if path else ""))


_spec_cache: dict[str, Any] | None = None


def load_spec(reload: bool = False) -> dict[str, Any]:
    """The loss spec from `$FP8RL_VERL_LOSS` (a JSON file path); `{}` when the variable is unset."""
    global _spec_cache
    if _spec_cache is None or reload:
        path = os.environ.get(SPEC_ENV)
        if not path:
            _spec_cache = {}
        else:
            try:
                with open(path) as fh:
                    _spec_cache = json.load(fh)
            except (OSError, json.JSONDecodeError) as exc:
                raise RuntimeError(f"{SPEC_ENV}={path}: cannot read the fp8rl loss spec ({exc})") from None
    return _spec_cache


def _cfg(config: Any, key: str, default: Any = None) -> Any:
    getter = getattr(config, "get", None)
    value = getter(key, default) if getter is not None else getattr(config, key, default)
    return default if value is None else value


def _clip_c(config: Any, spec: dict[str, Any]) -> float | None:
    if "clip_c" in spec:
        return None if spec["clip_c"] is None else float(spec["clip_c"])
    return float(_cfg(config, "clip_ratio_c", 3.0))


def clip_range(config: Any) -> tuple[float, float]:
    clip = float(_cfg(config, "clip_ratio", 0.2))
    return float(_cfg(config, "clip_ratio_low", clip)), float(_cfg(config, "clip_ratio_high", clip))


def _global_scale(mask: torch.Tensor, loss_agg_mode: str, info: dict[str, Any]) -> float:
    """Factor turning fp8rl's local aggregation into verl's global one (1.0 without global info)."""
    dp_size = int(info.get("dp_size") or 1)
    if loss_agg_mode == "token-mean":
        total = info.get("batch_num_tokens")
        local = float(mask.sum())
    else:
        total = info.get("global_batch_size")
        local = float((mask.sum(dim=-1) > 0).sum())
    if total is None:
        if dp_size > 1:
            raise ValueError(
                f"verl global_batch_info lacks the global count for {loss_agg_mode} (dp_size > 1)"
            )
        return 1.0
    total = float(total)
    return 0.0 if total == 0 else local / total * dp_size


def _metrics(m: dict[str, float], advantages: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """The same keys for every micro-batch (module docstring): `PLAIN_METRICS` as they are, each of
    `LOSS_METRICS` as `WEIGHTED_SUM + name` (value x weight) and `WEIGHTED_N + name` (weight: its
    population's size, or 1; both 0 when the micro-batch has no value), with `actor/ppo_kl` (verl's name
    for `loss/ppo_kl`, so verl's dashboards keep working). RuntimeError on a metric outside both lists:
    one logged by some micro-batches only would stop verl's DP aggregation."""
    m = dict(m)
    if "loss/ppo_kl" in m:
        m["actor/ppo_kl"] = m["loss/ppo_kl"]
    unknown = sorted(set(m) - set(LOSS_METRICS) - set(PLAIN_METRICS))
    if unknown:
        raise RuntimeError(
            f"fp8rl verl loss: metrics {unknown} are in neither LOSS_METRICS nor PLAIN_METRICS"
        )
    with torch.no_grad():
        adv = advantages.detach() if advantages.dim() == mask.dim() else advantages.detach().unsqueeze(-1)
        sizes = {
            "tokens": float(mask.sum()),
            "neg": float((mask & (adv < 0)).sum()),
            "pos": float((mask & (adv > 0)).sum()),
        }
    out = {name: float(m[name]) for name in PLAIN_METRICS if name in m}
    for name, population in LOSS_METRICS.items():
        weight = 0.0 if name not in m else 1.0 if population is None else sizes[population]
        out[verl_update.WEIGHTED_SUM + name] = float(m[name]) * weight if weight else 0.0
        out[verl_update.WEIGHTED_N + name] = weight
    return out


def token_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
    """The importance ratio exp(log_prob - old_log_prob), the log-ratio clamped as `policy_loss` clamps it."""
    with torch.no_grad():
        return torch.exp(
            torch.clamp(log_prob.detach() - old_log_prob.detach(), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        )


@dataclass(frozen=True)
class LossCall:
    """One call of a registered loss by verl (`ppo_loss`), as a named record: the tensors and settings
    verl hands every policy loss (module docstring)."""

    old_log_prob: torch.Tensor
    log_prob: torch.Tensor
    advantages: torch.Tensor
    response_mask: torch.Tensor
    loss_agg_mode: str
    config: Any
    rollout_is_weights: torch.Tensor | None


def _run(
    call: LossCall, is_weights: torch.Tensor | None, bounds: ClipBounds | None, extra: dict[str, float]
) -> tuple[torch.Tensor, dict[str, float]]:
    """`policy_loss` of one call under `bounds` (None: the fixed ones) with `is_weights`, rescaled to
    verl's global aggregation, and the call's metrics with `extra`."""
    mask = call.response_mask.bool()
    clip_low, clip_high = clip_range(call.config)
    loss, m = policy_loss(
        call.log_prob,
        call.old_log_prob,
        call.advantages,
        mask,
        bounds if bounds is not None else ClipBounds.fixed(clip_low, clip_high),
        LossTerms(clip_c=_clip_c(call.config, load_spec()), loss_agg_mode=call.loss_agg_mode),
        is_weights=is_weights,
    )
    info = dict(_cfg(call.config, "global_batch_info", {}) or {})
    loss = loss * _global_scale(mask, call.loss_agg_mode, info)
    with torch.no_grad():
        ratio = token_ratio(call.log_prob, call.old_log_prob)
        quantiles = ratio_quantiles(ratio, mask) if bool(mask.any()) else {}
    return loss, _metrics({**m, **quantiles, **extra}, call.advantages, mask)


# call -> (bounds or None: the fixed ones, extra metrics)
BoundsOf = Callable[[LossCall], tuple[ClipBounds | None, dict]]
# call -> the per-token weights of the loss (None: none)
WeightsOf = Callable[[LossCall], torch.Tensor | None]


def _verl_is_weights(call: LossCall) -> torch.Tensor | None:
    return call.rollout_is_weights


def verl_policy_loss(
    name: str,
    doc: str,
    *,
    bounds_of: BoundsOf | None = None,
    weights_of: WeightsOf = _verl_is_weights,
    needs_ratios: str | None = None,
) -> Callable[..., tuple[torch.Tensor, dict]]:
    """Register the policy loss `name` in verl with verl's signature: the inputs checked (a non-finite
    one is a divergence), then `policy_loss` under `bounds_of(call)` (None: the fixed bounds) with the
    per-token weights `weights_of(call)` (default: verl's `rollout_is_weights` as they are). A loss that
    reads verl's untruncated ratios from `rollout_is_weights` (fp8rl.adapters.verl_corrections
    `CORRECTION_LOSSES`) names what it needs them for in `needs_ratios`: without them it raises."""

    def loss(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        if config is None:
            raise ValueError(f"{name}: verl passes the actor config; got None")
        if needs_ratios and rollout_is_weights is None:
            raise ValueError(
                f"{name}: verl passed no rollout_is_weights ({needs_ratios}); the run needs "
                "algorithm.rollout_correction rollout_is: token with the untruncating threshold "
                "(fp8rl.adapters.verl_corrections)"
            )
        try:
            check_finite_inputs(
                log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages,
                rollout_is_weights=rollout_is_weights, response_mask=response_mask,
            )  # fmt: skip
        except NonFiniteLoss as exc:
            if not verl_update.POSITION.deferring:
                raise
            # raised on every rank after the mini-batch (verl_update.agree_finite): a zero loss over no
            # token now, so this rank reaches the update's collectives as the others do
            verl_update.POSITION.non_finite.append(str(exc))
            old_log_prob, log_prob, advantages = (
                torch.nan_to_num(t, 0.0, 0.0, 0.0) for t in (old_log_prob, log_prob, advantages)
            )
            if rollout_is_weights is not None:
                rollout_is_weights = torch.nan_to_num(rollout_is_weights, 0.0, 0.0, 0.0)
            response_mask = torch.zeros_like(response_mask)
        call = LossCall(
            old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights
        )
        bounds, extra = (None, {}) if bounds_of is None else bounds_of(call)
        return _run(call, weights_of(call), bounds, extra)

    loss.__name__ = loss.__qualname__ = f"{name}_loss"
    loss.__doc__ = doc
    return register_policy_loss(name)(loss)


def reset_spec() -> None:
    """Forget the cached spec (tests; a worker re-reading a changed spec)."""
    global _spec_cache
    _spec_cache = None
