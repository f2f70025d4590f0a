"""The recalibration cadence (`calib.every`): bounds computed at steps where (step - 1) % N == 0, held
between, checkpointed; without it (the default) every update is calibrated as before, bit for bit."""

from __future__ import annotations

import torch

from fp8rl.config import CalibConfig
from fp8rl.rl import Calibrator


def _update(seed: int, noise: float):
    g = torch.Generator().manual_seed(seed)
    ref = torch.exp(0.2 * torch.randn(4, 16, generator=g))
    ratio = ref * torch.exp(noise * torch.randn(4, 16, generator=g))
    adv = torch.randn(4, generator=g)
    return ratio, ref, adv, torch.ones(4, 16)


def _run(cal: Calibrator, steps: int = 7, updates: int = 2):
    """What UpdateBounds does per update: held bounds on a step that is not due, else calibrate and hold."""
    out = []
    for step in range(1, steps + 1):
        due = cal.due(step)
        for u in range(updates):
            ratio, ref, adv, mask = _update(step * 10 + u, 0.1 * step)
            if due:
                b, _ = cal.bounds(ratio, adv, mask, ref_ratio=ref, ref_mask=mask, ref_unchanged=u == 0)
                cal.hold(b, first_update=u == 0)
            else:
                b, m = cal.held_bounds()
                assert m == {"calib/low": b.low, "calib/high": b.high}
            out.append((step, u, due, tuple(b)))
    return out


def test_bounds_are_held_between_recalibrations():
    got = _run(Calibrator(0.2, 0.28, every=3))
    assert [s for s, u, due, _ in got if due and u == 0] == [1, 4, 7]
    by_step = {(s, u): b for s, u, _, b in got}
    for s in (2, 3):  # held: the last update of step 1, on every update
        assert by_step[(s, 0)] == by_step[(s, 1)] == by_step[(1, 1)]
    for s in (5, 6):
        assert by_step[(s, 0)] == by_step[(s, 1)] == by_step[(4, 1)]
    assert by_step[(1, 1)] != by_step[(4, 1)]


def test_per_update_is_the_default_and_unchanged():
    cfg = CalibConfig()
    assert cfg.every is None and "every" not in cfg.model_dump()
    assert CalibConfig(every=20).model_dump()["every"] == 20
    plain = Calibrator(0.2, 0.28)
    assert all(plain.due(s) for s in range(1, 50))
    default = _run(Calibrator.from_config(cfg, clip_low=0.2, clip_high=0.28))
    # the same sequence of calls on a calibrator that never heard of a cadence
    ref = Calibrator(0.2, 0.28)
    want = []
    for step in range(1, 8):
        for u in range(2):
            ratio, r, adv, mask = _update(step * 10 + u, 0.1 * step)
            b, _ = ref.bounds(ratio, adv, mask, ref_ratio=r, ref_mask=mask, ref_unchanged=u == 0)
            want.append(tuple(b))
    assert [b for *_, b in default] == want
    assert "held" not in plain.state_dict()


def test_held_bounds_survive_a_checkpoint():
    cal = Calibrator(0.2, 0.28, every=4)
    _run(cal, steps=2)
    state = cal.state_dict()
    again = Calibrator(0.2, 0.28, every=4)
    again.load_state_dict(state)
    assert again.held == cal.held and not again.due(3) and again.due(5)
