"""Synthetic phantom clipping (`fp8.ratio_noise`, the attribution tier): seeded noise on the PPO ratio's
log-probs only, in an otherwise clean (bf16-numerics) run.

FP8 noise does three things at once: it perturbs the PPO ratio (phantom clipping), the rollout/trainer
mismatch and the gradient. This knob reproduces the first alone. Each update's log-probs become
`lp + e` with `e = sqrt(2) * level * (1 - p_old) * z`, `z ~ N(0, 1)` per token and `p_old` the sampled
token's probability under the old policy: the noise model of `fp8rl study ratio-noise`
(fp8rl/rl/ratio_noise.py), whose `level` (a logit-error std) is sized there to give a target excess
clipping. `e` is a constant (no gradient): the loss's ratio, its clip decisions and the calibrator see
the noisy ratio; the gradient's path (GEMMs, optimizer) and the BF16 shadow pass stay clean, so the
paired `phantom/*` metrics measure exactly the clipping this noise adds.

The draws come from a generator seeded by (run seed, step), taken in update order: a run resumed from a
checkpoint (saved between steps) draws the same noise. Level 0 (the default) returns `lp` itself.
"""

from __future__ import annotations

import hashlib
import math

import torch


class RatioNoise:
    """The noise of one run (module docstring); `level` 0: none."""

    def __init__(self, level: float = 0.0):
        if not (math.isfinite(level) and level >= 0.0):
            raise ValueError(f"ratio noise level must be finite and >= 0, got {level}")
        self.level = float(level)
        self._gen: torch.Generator | None = None

    def start_step(self, seed: int, step: int) -> None:
        """Seed this step's draws (before its first update)."""
        if self.level > 0:
            digest = hashlib.sha256(f"{seed}:{step}:ratio_noise".encode()).hexdigest()[:15]
            self._gen = torch.Generator().manual_seed(int(digest, 16))

    def apply(self, lp: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
        """`lp` plus this update's noise (a constant: the gradient of `lp` is unchanged)."""
        if self.level == 0:
            return lp
        if self._gen is None:
            raise RuntimeError("RatioNoise.apply before start_step")
        z = torch.randn(lp.shape, generator=self._gen, dtype=torch.float32).to(lp.device, lp.dtype)
        p_old = old_log_prob.detach().exp().clamp(max=1.0)
        return lp + math.sqrt(2.0) * self.level * (1.0 - p_old) * z
