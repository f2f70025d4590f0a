"""Where calibrated clipping leaves the lower bound, update by update, in real training: tiny
fp8_tis_calib runs at noise dose 4 with the clipping tier's PPO shape (2 epochs x 2 mini-batches), each
update's bounds recorded as the trainer's `UpdateBounds.for_update` returns them.

- An update with nothing to clip below (target q = 0: the step's first update, whose reference ratio is
  identically 1, or a target that rounds to no token of the population) puts L just under the smallest
  ratio of the lower population, min(R) (1 - 1e-6), or at the clamp ceiling: no token is below it. That
  L may lie under the `low_range` floor: the clamp does not apply to it (docs/clipping.md).
- An update with a target of k > 0 tokens puts L inside `low_range`, with exactly k tokens below it where
  the clamp does not bind (ties
  aside: sampled groups repeat sequences).
- An update without an A<0 token (it happens on some kernel paths' rollouts) keeps the fixed bounds.
- metrics.jsonl's `calib/low` is the mean of the step's four L's, the first update's included.
"""

from __future__ import annotations

import pytest
import torch

from fp8rl.engine.update_bounds import UpdateBounds
from fp8rl.rl._checks import per_token
from fp8rl.rl.calibration import NOTHING_BELOW_MARGIN

LOW_RANGE = (0.5, 1.0)
CLIP_LOW = CLIP_HIGH = 0.2  # the tiny tier's grpo clip ratios


def _overrides(reference: str) -> dict:
    return {
        "matrix.conditions": [{"name": "s4", "fp8": {"noise_scale": 4.0}}],
        "matrix.seeds": [0],
        "schedule.steps": 3,
        "schedule.ppo_epochs": 2,
        "schedule.mini_batches": 2,
        "calib": {
            "reference": reference,
            "population": "neg",
            "upper": "proportional",
            "low_range": list(LOW_RANGE),
            "sample_frac": 1.0,
        },  # fmt: skip
    }


@pytest.mark.usefixtures("restore_torch_globals")
@pytest.mark.parametrize("reference", ["shadow", "static:0.1"])
def test_updates_with_q_zero_clip_nothing_below_and_calibrated_ones_stay_in_range(
    train, tmp_path, monkeypatch, reference
):
    updates = []
    real = UpdateBounds.for_update

    def recorded(self, step, mb, ratio):
        bounds, metrics = real(self, step, mb, ratio)
        mask = mb.mask.bool()
        adv = per_token("test", "advantages", mb.advantages, mask)
        pop = ratio.detach()[mask & (adv < 0)].to(torch.float64)
        updates.append({"step": step, "first": mb.first_update, "bounds": bounds, "metrics": dict(metrics),
                        "pop": pop})  # fmt: skip
        return bounds, metrics

    monkeypatch.setattr(UpdateBounds, "for_update", recorded)
    _, summary, rows = train(
        "grpo/tiny/fp8_tis_calib/tensorwise/s4/seed0", tmp_path / "run", _overrides(reference)
    )
    assert summary["status"] == "ok", summary["reason"]
    assert len(updates) == 4 * len(rows)  # 2 epochs x 2 mini-batches per step

    kinds = {"q0": 0, "calibrated": 0, "no A<0 token": 0}
    for u in updates:
        low, high = u["bounds"]
        pop = u["pop"]
        assert u["metrics"]["calib/low"] == low and u["metrics"]["calib/high"] == high
        if pop.numel() == 0:  # an update whose groups left no A<0 token (another kernel path's rollout)
            kinds["no A<0 token"] += 1
            assert (low, high) == pytest.approx((1 - CLIP_LOW, 1 + CLIP_HIGH)), u["step"]  # the fixed bounds
            continue
        q = u["metrics"]["calib/target_q"]
        k = round(q * pop.numel())
        if u["first"]:
            assert q == 0.0, u["step"]  # the reference ratio is identically 1: nothing to match
        if k == 0:
            kinds["q0"] += 1
            # just under the smallest ratio of the population (or the clamp ceiling): nothing clipped
            # below, wherever min(R) is, the low_range floor included
            want = min(float(pop.min()) * (1 - NOTHING_BELOW_MARGIN), LOW_RANGE[1])
            assert low == pytest.approx(want, rel=1e-12), u["step"]
            assert int((pop < low).sum()) == 0, u["step"]
            assert high == pytest.approx(1 + CLIP_HIGH)  # proportional: nothing to rebalance
        else:
            kinds["calibrated"] += 1
            assert LOW_RANGE[0] <= low <= LOW_RANGE[1], (u["step"], q, low)
            if LOW_RANGE[0] < low < LOW_RANGE[1]:  # k tokens below L, ties at L aside
                assert int((pop < low).sum()) <= k <= int((pop <= low).sum()), (u["step"], q, low)
            assert high == pytest.approx(1 + CLIP_HIGH * (1 - low) / CLIP_LOW)
    assert kinds["q0"] + kinds["no A<0 token"] >= len(rows)  # at least every step's first update
    if reference.startswith("static"):
        assert kinds["calibrated"] > 0  # a fixed q = 0.1 after the first update of each step

    # metrics.jsonl's calib/low: the mean over the step's updates, the first update's L included
    for row in rows:
        lows = [u["bounds"].low for u in updates if u["step"] == row["step"]]
        assert row["calib/low"] == pytest.approx(sum(lows) / len(lows), rel=1e-9)
