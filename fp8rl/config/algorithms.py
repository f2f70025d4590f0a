"""The RL algorithms' hyperparameters: GRPO and DAPO share `AlgorithmBase` and differ in their defaults
and in DAPO's dynamic sampling and overlong punishment."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fp8rl.config.base import LossAggMode, Strict
from fp8rl.vocabulary import KL_TYPES


class AlgorithmBase(Strict):
    clip_low: float = Field(0.2, gt=0.0, lt=1.0, description="PPO lower clip: r >= 1 - clip_low")
    clip_high: float = Field(0.2, gt=0.0, le=10.0, description="PPO upper clip: r <= 1 + clip_high")
    clip_c: float | None = Field(None, gt=1.0, description="dual-clip constant for A<0 tokens")
    group_size: int = Field(8, ge=2, description="samples per prompt")
    norm_adv_by_std: bool = True
    loss_agg_mode: LossAggMode = "token-mean"
    kl_coef: float = Field(0.0, ge=0.0, description="KL penalty to the reference policy; 0 disables it")
    kl_type: Literal[KL_TYPES] = "k3"
    entropy_coef: float = Field(0.0, ge=0.0)


class GRPOConfig(AlgorithmBase):
    """GRPO (Shao et al. 2024): symmetric clip 0.2, sequence-mean of token-mean losses, optional KL."""

    loss_agg_mode: LossAggMode = "seq-mean-token-mean"


class DAPOConfig(AlgorithmBase):
    """DAPO (Yu et al. 2025): clip-higher 0.2/0.28, dual clip, dynamic sampling, soft overlong
    punishment, token-mean aggregation, no KL."""

    clip_high: float = Field(0.28, gt=0.0, le=10.0)
    clip_c: float | None = Field(3.0, gt=1.0)
    dynamic_sampling: bool = True
    max_resample_rounds: int = Field(3, ge=0, description="extra rollout rounds to refill dropped groups")
    overlong_buffer_len: int = Field(
        4, ge=0, description="tokens before the length limit where the penalty ramps"
    )
    overlong_penalty_factor: float = Field(1.0, ge=0.0)


class AlgorithmsConfig(Strict):
    grpo: GRPOConfig = GRPOConfig()
    dapo: DAPOConfig = DAPOConfig()
