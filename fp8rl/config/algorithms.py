"""The RL algorithms' hyperparameters: GRPO and DAPO share `AlgorithmBase` and differ in their defaults
and in DAPO's dynamic sampling and overlong punishment."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fp8rl.config.base import LossAggMode, Strict
from fp8rl.vocabulary import KL_TYPES


class AlgorithmBase(Strict):
    """What GRPO and DAPO share: the PPO-clip objective, group advantages, loss aggregation, KL and
    entropy terms."""

    clip_low: float = Field(0.2, gt=0.0, lt=1.0, description="PPO lower clip: r >= 1 - clip_low")
    clip_high: float = Field(0.2, gt=0.0, le=10.0, description="PPO upper clip: r <= 1 + clip_high")
    clip_c: float | None = Field(None, gt=1.0, description="dual-clip constant for A<0 tokens")
    group_size: int = Field(8, ge=2, description="samples per prompt")
    norm_adv_by_std: bool = Field(
        True, description="divide the group-centred reward by the group's std; false: centred only (Dr. GRPO)"
    )
    loss_agg_mode: LossAggMode = Field(
        "token-mean",
        description="per-token losses to a scalar: token-mean, seq-mean-token-mean or "
        "seq-mean-token-sum (verl's agg_loss)",
    )
    kl_coef: float = Field(0.0, ge=0.0, description="KL penalty to the reference policy; 0 disables it")
    kl_type: Literal[KL_TYPES] = Field(
        "k3", description="KL penalty estimator: k1 (log-ratio) or k3 (verl's low_var_kl)"
    )
    entropy_coef: float = Field(
        0.0,
        ge=0.0,
        description="entropy bonus: coef x aggregated entropy is subtracted from the loss; 0: off",
    )


class GRPOConfig(AlgorithmBase):
    """GRPO (Shao et al. 2024): symmetric clip 0.2, sequence-mean of token-mean losses, optional KL."""

    loss_agg_mode: LossAggMode = Field(
        "seq-mean-token-mean",
        description="per-token losses to a scalar: token-mean, seq-mean-token-mean "
        "or seq-mean-token-sum (verl's agg_loss)",
    )


class DAPOConfig(AlgorithmBase):
    """DAPO (Yu et al. 2025): clip-higher 0.2/0.28, dual clip, dynamic sampling, soft overlong
    punishment, token-mean aggregation, no KL."""

    clip_high: float = Field(0.28, gt=0.0, le=10.0, description="PPO upper clip: r <= 1 + clip_high")
    clip_c: float | None = Field(3.0, gt=1.0, description="dual-clip constant for A<0 tokens; None: off")
    dynamic_sampling: bool = Field(
        True,
        description="drop the groups whose samples all got one reward (no advantage) and refill them "
        "with fresh prompts, up to max_resample_rounds more rounds",
    )
    max_resample_rounds: int = Field(3, ge=0, description="extra rollout rounds to refill dropped groups")
    overlong_buffer_len: int = Field(
        4, ge=0, description="tokens before the length limit where the penalty ramps"
    )
    overlong_penalty_factor: float = Field(
        1.0,
        ge=0.0,
        description="penalty at the length limit: the reward ramps down to -factor over the buffer",
    )


class AlgorithmsConfig(Strict):
    """Each algorithm's hyperparameters: the `grpo` and `dapo` runs of the matrix use their entry."""

    grpo: GRPOConfig = GRPOConfig()
    dapo: DAPOConfig = DAPOConfig()
