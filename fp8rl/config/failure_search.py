"""The `failure_search` section: where on a mismatch axis the decisive FP8 arm fails, decided by a rule
written into the config before the search's runs (fp8rl.report.failure_search reads it off the report).

A study whose FP8 conditions each set `fp8.target_kl` (the per-token KL between trainer and rollout
engine that each run's noise is searched for) is a search along the mismatch axis. Corrections are
compared only where the uncorrected arm fails, so the search names its rule before it runs:
- `decisive`: the variant whose failure decides (the paper's baseline, FP8 + TIS: `fp8_tis`); the study
  has one arm of it per condition;
- a setting **fails** when at least `min_diverged_frac` of the decisive arm's trained runs were flagged by
  a divergence detector (the tier's `stability` section: the instability endpoint), or, with
  `heldout_loss`, when the study's planned contrast of that arm against `reference` (the bf16 control) on
  the held-out endpoint has its adjusted p below `study.alpha` with a negative difference;
- the comparison of corrections then runs at the **lowest-KL setting that fails**; when none fails, that
  is the result: the search is published and no comparison is run.
"""

from __future__ import annotations

from pydantic import Field

from fp8rl.config.base import Strict, VariantName


class FailureSearchConfig(Strict):
    """The failure rule of a mismatch-axis search (module docstring)."""

    decisive: VariantName = Field(description="the FP8 variant whose failure decides, e.g. fp8_tis")
    reference: str = Field(description="the study arm of the bf16 control (a name in study.arms)")
    min_diverged_frac: float = Field(
        0.5, gt=0.0, le=1.0, description="a setting fails when this fraction of its runs diverged"
    )
    heldout_loss: bool = Field(
        True,
        description="a setting also fails when its planned held-out contrast vs reference is significant and below 0",
    )
