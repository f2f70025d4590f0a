"""The BF16 shadow pass of the reference trainer: the calibration reference and the phantom diagnostic.

In fp8 variants a random `calib.sample_frac` of each step's sequences (the shadow rows) is re-scored
with the policy's FP8 quantization switched off and its GEMMs bf16-emulated exactly as in the bf16
variant (`Precision.as_bf16`): once for the old policy, right after the trainer's log-prob recompute,
and once per mini-batch update for the current policy (no grad). Their ratio `π_θ / π_old` in BF16 is
the reference ratio of those tokens: `*_calib` variants calibrate their clip bounds against it
(`calib.reference: shadow`), and every fp8 variant derives `phantom/low_neg` and `phantom/missed_neg`
from it and counts both ratios in the run's `RatioHistogram`; the old policy's BF16 log-probs against the
FP8 trainer's are the step's `shadow_mismatch/*` (fp8rl.rl.mismatch). In the first update of a step the policy
is still the old one: the reference ratios are exactly 1 and no pass runs (nor does any when a step
has a single update). Its time is the `calib` phase.
"""

from __future__ import annotations

import math

import torch

from fp8rl.engine.phase_timer import PhaseTimer
from fp8rl.engine.sampler import RolloutBatch
from fp8rl.engine.scoring import score
from fp8rl.rl import RatioHistogram, masked_ratio
from fp8rl.rl.mismatch import SHADOW, mismatch_units


class ShadowPass:
    """One run's shadow pass: `start_step` once per rollout batch, `ref_ratios` per mini-batch."""

    def __init__(
        self,
        policy: torch.nn.Module,
        as_bf16,
        timer: PhaseTimer,
        sample_frac: float,
        temperature: float,
        *,
        packed: bool = False,
    ):
        """`as_bf16()` is the context that makes `policy` compute in bf16 (`Precision.as_bf16`); `packed`
        scores on real tokens only, as the trainer does (fp8rl.engine.packing)."""
        self.policy, self.as_bf16, self.timer = policy, as_bf16, timer
        self.sample_frac, self.temperature, self.packed = sample_frac, temperature, packed
        self.hist = RatioHistogram()
        self.pos: torch.Tensor | None = None  # [B]: row -> index among the shadow rows, -1 elsewhere
        self.ref_old: torch.Tensor | None = None  # [n_shadow, T] old-policy BF16 log-probs
        self.rows: torch.Tensor | None = None  # [n_shadow] this step's shadow rows

    def _score(self, batch: RolloutBatch) -> torch.Tensor:
        with self.timer.phase("calib") as ph, torch.no_grad(), self.as_bf16():
            lp, _ = score(self.policy, batch, temperature=self.temperature, packed=self.packed)
            ph.tokens = float(batch.attention_mask.sum())
        return lp

    def start_step(self, batch: RolloutBatch, generator: torch.Generator, *, single_update: bool) -> None:
        """Draw this step's shadow rows from `generator` and, unless the step has a single update, score
        them under the old (current) policy in BF16."""
        n_rows = len(batch.response_mask)
        device = batch.response_mask.device
        n = max(1, math.ceil(self.sample_frac * n_rows))
        rows = torch.randperm(n_rows, generator=generator)[:n].sort().values.to(device)
        self.pos = torch.full((n_rows,), -1, dtype=torch.long, device=device)
        self.pos[rows] = torch.arange(len(rows), device=device)
        self.rows = rows
        self.ref_old = None if single_update else self._score(batch.select(rows))

    def mismatch(self, old_log_prob: torch.Tensor, response_mask: torch.Tensor) -> dict[str, float]:
        """The FP8 trainer's old log-probs `old_log_prob` [B, T] against this step's BF16 re-score of
        the shadow rows, in the field's units (`shadow_mismatch/*`, fp8rl.rl.mismatch): what FP8 alone
        changes in the trainer's log-probs. Empty when the step has a single update (no BF16 re-score of
        the old policy is made then)."""
        if self.ref_old is None:
            return {}
        rows = self.rows
        return mismatch_units(old_log_prob[rows], self.ref_old, response_mask[rows], SHADOW)

    def ref_ratios(
        self,
        idx: torch.Tensor,
        sub: RolloutBatch,
        ratio: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        first_update: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(ref_ratio, ref_mask)` for the mini-batch of rows `idx` (`sub`, its FP8 `ratio` and `mask`):
        BF16 ratios on its shadow rows (1 elsewhere, and everywhere in the step's first update) and the
        response mask restricted to the shadow rows. Records the shadow tokens' FP8 and BF16 ratios in
        the histogram."""
        pos = self.pos[idx]
        local = (pos >= 0).nonzero().squeeze(-1)
        ref_ratio = torch.ones_like(ratio)
        ref_mask = torch.zeros_like(mask)
        ref_mask[local] = mask[local]
        if len(local) and not first_update:
            cur = self._score(sub.select(local))
            ref_ratio[local] = masked_ratio(cur, self.ref_old[pos[local]], mask[local])
            self.hist.add(ratio[local], ref_ratio[local], advantages[local], mask[local])
        return ref_ratio, ref_mask
