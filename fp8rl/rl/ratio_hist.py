"""Histograms of the PPO ratio under FP8 and under the BF16 shadow pass, on the same tokens.

The paper's mechanism is a widened FP8 ratio distribution: negative-advantage tokens fall below the lower
clip bound where BF16 would keep them. `RatioHistogram` accumulates, over a run, counts of the trainer's
ratio `r = π_θ/π_old` (`fp8`) and of the shadow ratio of the same tokens with quantization switched off
(`bf16_shadow`), on fixed log-spaced bins, for all valid tokens (`all`) and A<0 tokens (`neg`). Fixed
bins make runs and seeds add up; the end bins also hold everything below / above the range.
"""

from __future__ import annotations

import math

import torch

RANGE = (0.25, 4.0)
N_BINS = 96
# Inner edges; `bucketize` gives N_BINS + 2 buckets: [< 0.25], N_BINS log-spaced, [>= 4.0].
EDGES = torch.exp(torch.linspace(math.log(RANGE[0]), math.log(RANGE[1]), N_BINS + 1, dtype=torch.float64))
KEYS = ("fp8/all", "bf16_shadow/all", "fp8/neg", "bf16_shadow/neg")


class RatioHistogram:
    """Counts of FP8 vs BF16-shadow ratios of the same tokens (see the module docstring)."""

    def __init__(self) -> None:
        self.counts = {k: torch.zeros(N_BINS + 2, dtype=torch.long) for k in KEYS}

    def add(
        self, ratio: torch.Tensor, ref_ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
    ) -> None:
        """Count the valid tokens (`mask` 1) of `ratio` (FP8) and `ref_ratio` (shadow), both [B, T];
        `advantages` [B] or [B, T] picks the A<0 tokens."""
        if ratio.shape != ref_ratio.shape or ratio.shape != mask.shape:
            raise ValueError(
                f"ratio_hist: ratio {tuple(ratio.shape)}, ref_ratio {tuple(ref_ratio.shape)} and mask "
                f"{tuple(mask.shape)} must have one shape"
            )
        adv = advantages.unsqueeze(-1).expand_as(ratio) if advantages.dim() == 1 else advantages
        valid = mask.bool()
        neg = valid & (adv < 0)
        for name, values in (("fp8", ratio), ("bf16_shadow", ref_ratio)):
            for pop, sel in (("all", valid), ("neg", neg)):
                idx = torch.bucketize(values.detach()[sel].to("cpu", torch.float64), EDGES)
                self.counts[f"{name}/{pop}"] += torch.bincount(idx, minlength=N_BINS + 2)

    @property
    def tokens(self) -> int:
        return int(self.counts["fp8/all"].sum())

    def state_dict(self) -> dict:
        return {k: v.clone() for k, v in self.counts.items()}

    def load_state_dict(self, state: dict) -> None:
        self.counts = {k: state[k].clone() for k in KEYS}

    def as_dict(self) -> dict:
        """JSON-ready: `edges` (the N_BINS + 1 inner edges), `counts` per key (N_BINS + 2 buckets, the
        first below `edges[0]`, the last at or above `edges[-1]`), `tokens`."""
        return {
            "edges": [float(e) for e in EDGES],
            "counts": {k: [int(c) for c in v] for k, v in self.counts.items()},
            "tokens": self.tokens,
        }
