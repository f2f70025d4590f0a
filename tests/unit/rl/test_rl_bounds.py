"""ClipBounds: PPO-clip's (L, U) as one value, the one form of bounds policy_loss takes."""

import pytest
import torch

from fp8rl.rl import ClipBounds, policy_loss


def test_fixed_bounds_and_validation():
    b = ClipBounds.fixed(0.2, 0.28)
    assert b == (1.0 - 0.2, 1.0 + 0.28) and (b.low, b.high) == tuple(b)
    for bad in [(0.0, 0.2), (1.0, 0.2), (0.2, 0.0)]:
        with pytest.raises(ValueError, match="clip_"):
            ClipBounds.fixed(*bad)
    for bad in [(1.2, 1.0), (-0.1, 1.0), (0.8, float("inf")), (float("nan"), 1.2)]:
        with pytest.raises(ValueError, match="0 <= low <= high"):
            ClipBounds(*bad)


def test_policy_loss_takes_clip_bounds_only_and_clips_with_them():
    g = torch.Generator().manual_seed(0)
    lp, old = torch.randn(4, 6, generator=g) * 0.3, torch.randn(4, 6, generator=g) * 0.3
    adv, mask = torch.tensor([1.0, -1.0, 0.5, -2.0]), torch.ones(4, 6)
    mask[1, 4:] = 0
    b_loss, b_m = policy_loss(lp, old, adv, mask, ClipBounds.fixed(0.2, 0.28))
    same_loss, same_m = policy_loss(lp, old, adv, mask, ClipBounds(0.8, 1.28))
    assert torch.equal(b_loss, same_loss) and b_m == same_m
    wide_loss, wide_m = policy_loss(lp, old, adv, mask, ClipBounds(0.5, 1.5))
    assert wide_m["clip/low_neg"] < b_m["clip/low_neg"] and not torch.equal(wide_loss, b_loss)
    with pytest.raises(TypeError, match="policy_loss: bounds must be a ClipBounds"):
        policy_loss(lp, old, adv, mask, (0.8, 1.28))
