"""The clip bounds of each PPO update in the reference trainer, and the paired clipping metrics.

`UpdateBounds.for_update(step, mb, ratio)` gives the bounds one mini-batch update clips with: the
algorithm's fixed ones, or for `*_calib` variants the `Calibrator`'s against its reference
(`calib.reference`): the BF16 shadow pass's ratios of the same tokens (`shadow`), the bf16 run's
per-step clip fractions (`run`), or its static target. With a shadow pass (every fp8 variant) it also
returns `phantom/low_neg` and `phantom/missed_neg`: negative-advantage tokens clipped under FP8 but not
under BF16, and the reverse. The calibrator's own time is the `calib` phase.

With a recalibration cadence (`calib.every` N) the calibrator's bounds are computed in the steps where
`(step - 1) % N == 0` and held through the steps between (`Calibrator.due` / `hold`); a held update runs
no per-update shadow pass, so what the cadence saves shows in `time/calib_s` (the old policy's BF16
re-score at the start of each step still runs: it gives `shadow_mismatch/*`). A correction that sets
each update's bounds itself (QuRL's adaptive clip range, `CorrectionDef.bounds`) applies them on top,
from the update's FP8 ratios and the shadow pass's BF16 ones.
"""

from __future__ import annotations

import torch

from fp8rl.engine.phase_timer import PhaseTimer
from fp8rl.engine.shadow import ShadowPass
from fp8rl.engine.update_batch import MiniBatch
from fp8rl.rl import Calibrator, ClipBounds, phantom_low_neg
from fp8rl.rl.calibration import step_targets
from fp8rl.rl.corrections import CorrectionDef

RunTargets = dict[int, tuple[float | None, float | None]]  # step -> the bf16 run's (q, q_high)


class UpdateBounds:
    """One run's source of clip bounds (module doc); the calibrator and shadow pass are the trainer's."""

    def __init__(
        self,
        fixed: ClipBounds,
        *,
        calibrator: Calibrator | None,
        shadow: ShadowPass | None,
        reference: str,
        run_targets: RunTargets,
        updates_per_step: int,
        timer: PhaseTimer,
        correction: CorrectionDef | None = None,
    ) -> None:
        """`correction`: the variant's registered correction; its `bounds`, when it has them, set each
        update's bounds on top of the others (it needs the shadow pass)."""
        self.fixed, self.calibrator, self.shadow = fixed, calibrator, shadow
        self.reference, self.run_targets = reference, run_targets
        self.updates_per_step, self.timer = updates_per_step, timer
        self.correction_bounds = correction.bounds if correction is not None else None
        if self.correction_bounds is not None and shadow is None:
            raise ValueError(
                f"correction {correction.name!r} sets its bounds from the BF16 shadow pass: it needs one"
            )

    def run_target(self, step: int) -> tuple[float | None, float | None]:
        """This step's targets from the bf16 run (`calib.reference: run`): `step_targets`."""
        return step_targets(self.run_targets, step, self.updates_per_step)

    def for_update(
        self, step: int, mb: MiniBatch, ratio: torch.Tensor
    ) -> tuple[ClipBounds, dict[str, float]]:
        """The mini-batch's clip bounds (calibrated for `*_calib`, else the fixed ones) and the
        `calib/*` and `phantom/*` metrics."""
        metrics: dict[str, float] = {}
        ref_ratio = ref_mask = None
        held = self.calibrator is not None and not self.calibrator.due(step)
        if self.shadow is not None and not (held and self.correction_bounds is None):
            ref_ratio, ref_mask = self.shadow.ref_ratios(
                mb.idx, mb.batch, ratio, mb.advantages, mb.mask, mb.first_update
            )
        bounds = self.fixed
        if held:
            bounds, cm = self.calibrator.held_bounds()
            metrics.update(cm)
        elif self.calibrator is not None:
            kw = {}
            if self.reference == "shadow":
                kw = {"ref_ratio": ref_ratio, "ref_mask": ref_mask}
            elif self.reference == "run":
                q, q_hi = self.run_target(step)
                kw = {"target_q": q, "target_q_high": q_hi}
            with self.timer.phase("calib"):
                # The step's first update scores the policy that produced the old log-probs: its
                # reference ratio is identically 1, so it clips nothing below and leaves the pool alone.
                bounds, cm = self.calibrator.bounds(
                    ratio, mb.advantages, mb.mask, ref_unchanged=mb.first_update, **kw
                )
                self.calibrator.hold(bounds, first_update=mb.first_update)
            metrics.update(cm)
        if self.correction_bounds is not None:
            with self.timer.phase("calib"):
                bounds, qm = self.correction_bounds(ratio, ref_ratio, ref_mask, bounds)
            metrics.update(qm)
        if ref_ratio is not None and bool(ref_mask.any()):
            metrics.update(
                phantom_low_neg(ratio, ref_ratio, mb.advantages, ref_mask, bounds.low, self.fixed.low)
            )
        return bounds, metrics
