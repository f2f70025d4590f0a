"""QuRL's adaptive clip range inside verl: the `fp8rl_qurl` policy loss, registered on import (verl_loss
imports this module, so every Ray worker that loads fp8rl's losses has it).

QuRL (fp8rl.rl.corrections.qurl) widens each update's clip range in log space by a gap `g` measured
between a full-precision and a quantized policy: `L = (1 - clip_low) exp(-g)`, `U = (1 + clip_high)
exp(g)` (`widened`, the reference trainer's step from the gap to the bounds). What verl 0.9.1 hands a
policy loss decides which gap the verl path can measure:

- the reference trainer: `g = mean_t |log R_t - log R_ref,t|`, the FP8 trainer's PPO ratio `R = pi_theta /
  pi_old` against its BF16 shadow pass's `R_ref` on the same tokens (each step's first update: `g = 0`);
- verl: no BF16 re-score of the FP8 actor exists (a second forward of the Megatron actor with Transformer
  Engine's FP8 switched off). What verl has is the ratio QuRL's paper names: the full-precision
  trainer's over the quantized sampler's, `r_t = pi_old(a_t) / pi_rollout(a_t)`, the token ratio verl's
  rollout correction computes. The run sets `rollout_is: token` with a threshold that truncates nothing
  (fp8rl.adapters.verl_corrections `RAW_RATIO_THRESHOLD`), so `rollout_is_weights` are `r_t` (log-ratio
  clamped at +-20), and the gap is `g = mean_t |log r_t|` over the update's tokens: `qurl_bounds(r, 1,
  mask, fixed)`, the reference trainer's function with the reference ratio 1.

So on verl the gap is the trainer/rollout mismatch (docs/architecture.md's `mismatch/abs_dlogp`), the
same on every update of a step (old and rollout log-probs are fixed for the step) and not 0 on its
first update; in the reference trainer it is the FP8 noise of the PPO ratio itself
(docs/paper_deviations.md). The ratios only measure the gap: they are not weights (QuRL alone has none).

One gap per update, as the reference trainer has: before verl splits a mini-batch into micro-batches,
`update_gap` (fp8rl.adapters.verl_update `PREPARE`) sums `|log r_t|` and counts the valid tokens on this
rank, the DP group all-gathers both, and every rank sets the same bounds; no forward pass is needed.
A direct call of the loss (no update prepared) sets them from its own micro-batch. Metrics:
`qurl/gap`, `qurl/low`, `qurl/high`.
"""

from __future__ import annotations

from typing import Any

import torch

from fp8rl.adapters import verl_policy, verl_update
from fp8rl.rl import LOG_RATIO_CLAMP, ClipBounds
from fp8rl.rl.corrections.qurl import qurl_bounds, widened

LOSS_NAME = "fp8rl_qurl"
NEEDS = "QuRL measures its gap from the trainer/rollout ratios"


def _fixed(config: Any) -> ClipBounds:
    return ClipBounds.fixed(*verl_policy.clip_range(config))


def log_ratio_sum(rollout_is_weights: torch.Tensor, mask: torch.Tensor) -> tuple[float, int]:
    """`(sum_t |log r_t|, n)` over the valid tokens (`mask`) of verl's untruncated ratios, in float64
    with the log-ratio clamped as `qurl_bounds` clamps it."""
    m = mask.bool()
    with torch.no_grad():
        lr = torch.log(rollout_is_weights.detach().double()[m]).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return float(lr.abs().sum()), int(m.sum())


def update_gap(worker: Any, data: Any) -> tuple[ClipBounds | None, dict[str, float]]:
    """The bounds of one mini-batch update and their metrics, the same on every DP rank: the gap over
    the update's valid tokens on all ranks (module docstring). `(None, {})` when the update has no valid
    token: the fixed bounds, without `qurl/*` metrics, as the reference trainer has them."""
    import torch.distributed as dist

    if "rollout_is_weights" not in data.keys():  # noqa: SIM118 (a TensorDict refuses `in`)
        raise ValueError(
            f"{LOSS_NAME}: the mini-batch has no rollout_is_weights ({NEEDS}); the run needs "
            "algorithm.rollout_correction rollout_is: token (fp8rl.adapters.verl_corrections)"
        )
    mb = data.select("response_mask", "rollout_is_weights").to_padded_tensor()
    local = log_ratio_sum(mb["rollout_is_weights"], mb["response_mask"])
    gathered = [local]
    group = worker.engine.get_data_parallel_group()
    if group is not None and dist.is_initialized() and dist.get_world_size(group) > 1:
        gathered = [None] * dist.get_world_size(group)
        dist.all_gather_object(gathered, local, group=group)
    total, n = sum(g[0] for g in gathered), sum(g[1] for g in gathered)
    if n == 0:
        return None, {}
    return widened(_fixed(worker.loss_fn.keywords["config"]), total / n)


def _bounds(call: verl_policy.LossCall) -> tuple[ClipBounds | None, dict[str, float]]:
    """The update's bounds `update_gap` set; without them (a direct call) this micro-batch's own."""
    if verl_update.POSITION.prepared is not None:
        return verl_update.POSITION.prepared
    r = call.rollout_is_weights
    return qurl_bounds(r, torch.ones_like(r), call.response_mask.bool(), _fixed(call.config))


def _no_weights(call: verl_policy.LossCall) -> None:
    return None


fp8rl_qurl_loss = verl_policy.verl_policy_loss(
    LOSS_NAME,
    "PPO-clip whose bounds QuRL's adaptive clip range widens by the update's trainer/rollout gap "
    "(fp8rl.adapters.verl_qurl); no per-token weights.",
    bounds_of=_bounds,
    weights_of=_no_weights,
    needs_ratios=NEEDS,
)

verl_update.PREPARE[LOSS_NAME] = update_gap
