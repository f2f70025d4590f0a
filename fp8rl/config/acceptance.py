"""The `acceptance` section: what a testbed tier must show on its bf16 runs alone before any FP8 run is
made on it (fp8rl.engine.acceptance checks it).

Written into the config before the FP8 runs, as a study's pre-registration is: a testbed whose bf16
control does not learn, or starts with no entropy to lose, or whose bf16 runs already trip a detector,
cannot show what FP8 does to learning. The criteria:
- the bf16 control rises: the mean over bases of (final checkpoint - base) on `endpoint` (a held-out
  metric of `eval.heldout`, sampled with the bf16 sampler) is at least `min_rise`, and its two-sided
  `confidence` t-interval over the bases lies above 0, over at least `min_bases` bases;
- every bf16 run's per-token entropy at step 1 is at least `min_start_entropy` nats;
- every bf16 run's responses at step 1 average at least `min_response_tokens` tokens;
- no bf16 run is flagged by a divergence detector (`no_divergence`).
"""

from __future__ import annotations

from pydantic import Field

from fp8rl.config.base import Strict
from fp8rl.vocabulary import HELDOUT_METRICS


class AcceptanceConfig(Strict):
    """A testbed's acceptance on its bf16 runs (module docstring)."""

    arm: str = Field(description="the bf16 cell without the seed: algo/model/variant/granularity[/condition]")
    endpoint: str = Field(
        "heldout/sampled_reward",
        pattern="^heldout/(" + "|".join(HELDOUT_METRICS) + ")$",
        description="a held-out metric (eval.heldout): base and final checkpoint, bf16 sampler",
    )
    min_rise: float = Field(gt=0.0, description="the least mean rise of the endpoint over the bases")
    confidence: float = Field(0.95, gt=0.5, lt=1.0, description="the t-interval of the rise lies above 0")
    min_bases: int = Field(4, ge=2, description="bases (one bf16 run each) the rise is measured over")
    min_start_entropy: float = Field(0.3, ge=0.0, description="nats per token at RL step 1, every run")
    min_response_tokens: float = Field(32.0, ge=0.0, description="mean response length at step 1, every run")
    no_divergence: bool = Field(True, description="no bf16 run flagged by a divergence detector")
