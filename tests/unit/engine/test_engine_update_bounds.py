"""`UpdateBounds`: the fixed bounds without a calibrator, the bf16 run's targets rescaled to the updates
after the first, and the phantom metrics against the shadow pass's ratios."""

from __future__ import annotations

import pytest
import torch

from fp8rl.engine.phase_timer import PhaseTimer
from fp8rl.engine.update_batch import MiniBatch
from fp8rl.engine.update_bounds import UpdateBounds
from fp8rl.rl import ClipBounds

FIXED = ClipBounds.fixed(0.2, 0.28)


def _bounds(**kw) -> UpdateBounds:
    args = {
        "calibrator": None,
        "shadow": None,
        "reference": "shadow",
        "run_targets": {},
        "updates_per_step": 4,
    }
    return UpdateBounds(FIXED, timer=PhaseTimer(torch.device("cpu")), **{**args, **kw})


def _mini_batch(advantages: list[float], first_update: bool = False) -> MiniBatch:
    n = len(advantages)
    mask = torch.ones(n, 2)
    return MiniBatch(torch.arange(n), None, mask, torch.tensor(advantages), torch.zeros(n, 2), None, None,
                     first_update)  # fmt: skip


def test_run_targets_are_carried_by_the_updates_after_the_first():
    b = _bounds(reference="run", run_targets={3: (0.03, None), 4: (0.9, 0.01)})
    assert b.run_target(3) == (pytest.approx(0.04), None)  # 0.03 * 4 / 3
    assert b.run_target(4) == (1.0, pytest.approx(0.01 * 4 / 3))  # capped at 1
    assert b.run_target(5) == (None, None)  # the bf16 run had no line for this step
    assert _bounds(reference="run", run_targets={1: (0.03, None)}, updates_per_step=1).run_target(1) == (
        0.03,
        None,
    )


def test_without_calibrator_or_shadow_the_fixed_bounds_and_no_metrics():
    bounds, metrics = _bounds().for_update(1, _mini_batch([1.0, -1.0]), torch.ones(2, 2))
    assert bounds is FIXED and metrics == {}


class _Shadow:
    """The shadow pass's interface: BF16 reference ratios of the mini-batch (here: given)."""

    def __init__(self, ref_ratio: torch.Tensor):
        self.ref_ratio = ref_ratio

    def ref_ratios(self, idx, batch, ratio, advantages, mask, first_update):
        return self.ref_ratio, mask


def test_phantom_metrics_pair_fp8_and_bf16_clipping_of_negative_tokens():
    # rows 1-2 have A<0 (4 tokens); FP8 clips tokens (1,0), (1,1), (2,0); BF16 clips (1,1) and (2,1)
    ratio = torch.tensor([[0.5, 0.5], [0.7, 0.7], [0.7, 1.0]])
    ref = torch.tensor([[1.0, 1.0], [1.0, 0.7], [1.0, 0.7]])
    b = _bounds(shadow=_Shadow(ref))
    bounds, metrics = b.for_update(2, _mini_batch([1.0, -1.0, -0.5]), ratio)
    assert bounds is FIXED
    assert metrics == {"phantom/low_neg": pytest.approx(2 / 4), "phantom/missed_neg": pytest.approx(1 / 4)}
