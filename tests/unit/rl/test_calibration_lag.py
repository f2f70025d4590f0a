"""The calibrated target tracks its reference without lag.

Over a run the BF16 clip fraction falls (smoke: from ~5 % to ~1 %). A target pooled over updates
(an EMA of the counts, `calib.momentum` 0.9) trails it and keeps the FP8 lower bound too high, so a
calibrated run clipped more negative-advantage tokens than plain FP8. The default calibrator takes each
update's target from that update's own reference tokens; these tests fail if it lags again.
"""

from __future__ import annotations

import pytest
import torch

from fp8rl.config import CalibConfig
from fp8rl.rl import Calibrator
from fp8rl.rl.calibration import centred_window

CL, CH = 0.2, 0.2
N_TOKENS = 4000  # reference tokens per update


def _falling_run(momentum: float, updates: int = 40, seed: int = 0) -> tuple[list[float], list[float]]:
    """(the reference's clip fraction per update, the calibrator's target per update) while the
    fraction falls linearly from 5 % to 1 %; the FP8 ratios are the reference ones, a little noisier."""
    g = torch.Generator().manual_seed(seed)
    cal = Calibrator(CL, CH, momentum=momentum)
    true, targets = [], []
    for i in range(updates):
        q = 0.05 - 0.04 * i / (updates - 1)
        below = torch.zeros(1, N_TOKENS, dtype=torch.bool)  # exactly round(q n) tokens: no sampling noise
        below[0, torch.randperm(N_TOKENS, generator=g)[: round(q * N_TOKENS)]] = True
        r_ref = torch.where(
            below, 0.7, 1.0 + 0.05 * torch.rand(1, N_TOKENS, generator=g, dtype=torch.float64)
        )
        r = r_ref * (1 + 0.02 * torch.randn(1, N_TOKENS, generator=g, dtype=torch.float64))
        adv, mask = -torch.ones(1, dtype=torch.float64), torch.ones(1, N_TOKENS, dtype=torch.bool)
        true.append(float(below.double().mean()))
        targets.append(cal.bounds(r, adv, mask, ref_ratio=r_ref)[1]["calib/target_q"])
    return true, targets


def test_the_default_target_follows_a_falling_clip_fraction_without_lag():
    true, targets = _falling_run(CalibConfig().momentum)
    for q, t in zip(true, targets, strict=True):
        assert t == pytest.approx(q, abs=1e-12)  # the update's own count: no lag at all


def test_a_pooled_target_overshoots_a_falling_clip_fraction():
    """The measured lag of the pooling option: with momentum 0.9 the target stays above the falling
    reference fraction at every update after the first."""
    true, targets = _falling_run(0.9)
    excess = [t - q for q, t in zip(true[1:], targets[1:], strict=True)]
    assert all(e > 0 for e in excess)
    # late in the run the pool is ~9 updates behind: 9 x 0.001 per update ~ 0.009 too high (~+60 %)
    assert sum(excess[-10:]) / 10 > 0.005
    assert targets[-1] > 1.4 * true[-1]


def test_a_lagging_calibrator_is_caught():
    """The first test's check, applied to the pooled calibrator, fails: it is a real lag detector."""
    true, targets = _falling_run(0.9)
    assert any(abs(t - q) > 1e-3 for q, t in zip(true, targets, strict=True))


def test_the_run_reference_window_is_centred():
    """A centred moving mean of a finished run's per-step fractions has no lag: on a linear trend it
    returns the trend itself (away from the ends), where a trailing window would lag by (w-1)/2 steps."""
    steps = {s: (0.05 - 0.001 * s, None) for s in range(1, 31)}
    smooth = centred_window(steps, 5)
    for s in range(3, 29):
        assert smooth[s][0] == pytest.approx(steps[s][0], abs=1e-12)
        assert smooth[s][1] is None
    assert centred_window(steps, 1) == steps
    with pytest.raises(ValueError, match="odd"):
        centred_window(steps, 4)
