"""The records one RL step's PPO updates pass around: the step's scores, a mini-batch, metric means.

`StepScores` is what the trainer computes once per rollout batch (old log-probs, TIS weights, the KL
policy's log-probs, and the forward a single-update step reuses); `MiniBatch` is one update's rows of
all of it; `StepMeans` averages the per-update metrics into the step's line of metrics.jsonl.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fp8rl.engine.sampler import RolloutBatch


@dataclass(frozen=True)
class StepScores:
    """The trainer's scoring of a step's rollout batch, shared by all its PPO updates (rows as the batch)."""

    old_log_prob: torch.Tensor  # [B, T] the trainer's own log-probs of the sampled tokens (detached)
    is_weights: torch.Tensor | None  # [B, T] TIS weights (`*_tis` variants)
    kl_ref_log_prob: torch.Tensor | None  # [B, T] the frozen KL policy's log-probs (kl_coef > 0)
    # With a single update per step, the forward that gave `old_log_prob` (log-probs with grad, logits)
    # is the update's own forward: nothing has changed in between.
    reused_forward: tuple[torch.Tensor, torch.Tensor] | None
    # [B] bool: the sequences the correction keeps in the loss (masked IS); None keeps every one
    keep: torch.Tensor | None = None
    # [B, T, V] score centering's coefficients (fp8rl.rl.corrections.scorecenter); None: no centering
    centering: torch.Tensor | None = None


@dataclass(frozen=True)
class MiniBatch:
    """One PPO update's rows `idx` of the step's batch, with everything the update reads."""

    idx: torch.Tensor  # [b] rows of the step's rollout batch
    batch: RolloutBatch
    mask: torch.Tensor  # [b, T] response mask, without the sequences the correction dropped
    advantages: torch.Tensor  # [b]
    old_log_prob: torch.Tensor  # [b, T]
    is_weights: torch.Tensor | None
    kl_ref_log_prob: torch.Tensor | None
    first_update: bool  # the step's first update: the policy is still the one that was scored
    centering: torch.Tensor | None = None  # [b, T, V] score centering's coefficients

    @classmethod
    def select(cls, batch: RolloutBatch, advantages: torch.Tensor, scores: StepScores, idx, first_update):
        def rows(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x[idx]

        mask = batch.response_mask[idx]
        if scores.keep is not None:  # masked IS: dropped sequences leave the loss and its token counts
            mask = mask * scores.keep[idx, None].to(mask.dtype)
        return cls(
            idx, batch.select(idx), mask, advantages[idx], scores.old_log_prob[idx],
            rows(scores.is_weights), rows(scores.kl_ref_log_prob), first_update, rows(scores.centering),
        )  # fmt: skip


class StepMeans:
    """Per-step means of the metrics that each PPO update reports (`clip/*`, `calib/*`, `loss/*`, ...):
    a key missing from an update is averaged over the updates that have it."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            self.sums[k] = self.sums.get(k, 0.0) + float(v)
            self.counts[k] = self.counts.get(k, 0) + 1

    def means(self) -> dict[str, float]:
        return {k: self.sums[k] / self.counts[k] for k in self.sums}
