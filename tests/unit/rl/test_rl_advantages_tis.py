"""GRPO advantages, DAPO dynamic sampling and overlong punishment, TIS weights and IcePop."""

from __future__ import annotations

import math

import pytest
import torch

from fp8rl.rl import (
    dynamic_sampling_mask,
    grpo_advantages,
    overlong_penalty,
    tis_ratio,
    tis_stats,
    tis_weights,
)


def test_grpo_by_hand():
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 4.0]), 3)
    # group 1: mean 1/3, std sqrt(1/3); group 2: mean 2, std 2
    s = math.sqrt(1 / 3)
    assert adv.tolist() == pytest.approx([(2 / 3) / s, (-1 / 3) / s, (-1 / 3) / s, -1.0, 0.0, 1.0], abs=1e-5)
    assert grpo_advantages(torch.tensor([1.0, 0.0, 2.0, 4.0]), 2, norm_std=False).tolist() == [
        0.5,
        -0.5,
        -1,
        1,
    ]


def test_grpo_all_equal_group_is_zero_not_nan():
    adv = grpo_advantages(torch.tensor([1.0, 1.0, 1.0, 0.0]), 2)
    assert adv[:2].tolist() == [0.0, 0.0] and torch.isfinite(adv).all()


@pytest.mark.parametrize(
    "rewards, group_size, match",
    [
        (torch.ones(5), 2, "do not split"),
        (torch.ones(2, 2), 2, "1-D"),
        (torch.tensor([1.0, float("nan")]), 2, "non-finite"),
        (torch.ones(4), 0, "positive int"),
    ],
)
def test_grpo_bad_input(rewards, group_size, match):
    with pytest.raises(ValueError, match=match):
        grpo_advantages(rewards, group_size)


def test_dynamic_sampling_drops_uniform_groups():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5])
    keep, dropped = dynamic_sampling_mask(rewards, 3)
    assert keep.tolist() == [True] * 3 + [False] * 3 + [False] * 3
    assert dropped == 2
    keep, dropped = dynamic_sampling_mask(torch.tensor([0.0, 1.0, 0.0, 1.0]), 2)
    assert keep.all() and dropped == 0


def test_overlong_penalty_ramp():
    # max 10, buffer 4: no penalty up to 6 tokens, -0.25 per token after, -1 at 10 (factor 1)
    got = overlong_penalty(torch.tensor([3, 6, 7, 8, 10]), max_len=10, buffer_len=4, factor=1.0)
    assert got.tolist() == [0.0, 0.0, -0.25, -0.5, -1.0]
    assert overlong_penalty(torch.tensor([10]), 10, 4, 0.5).tolist() == [-0.5]
    assert overlong_penalty(torch.tensor([10]), 10, 0, 1.0).tolist() == [0.0]
    with pytest.raises(ValueError, match="buffer_len"):
        overlong_penalty(torch.tensor([1]), 4, 5, 1.0)


def _lp():
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]])
    rollout = torch.tensor([[-2.0, -1.0, -0.5], [-1.2, -0.9, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    return old, rollout, mask


def test_token_tis_truncates_and_detaches():
    old, rollout, mask = _lp()
    old.requires_grad_(True)
    w = tis_weights(old, rollout, mask, cap=2.0)
    assert not w.requires_grad
    want = [[2.0, math.exp(-1.0), 1.0], [math.exp(0.2), math.exp(-0.1), 0.0]]
    assert w.tolist() == [pytest.approx(r) for r in want]


def test_sequence_tis_uses_the_product_of_token_ratios():
    old, rollout, mask = _lp()
    w = tis_weights(old, rollout, mask, cap=5.0, level="sequence")
    assert w[0].tolist() == pytest.approx([1.0] * 3)  # exp(1 - 1 + 0)
    assert w[1].tolist() == pytest.approx([math.exp(0.1)] * 2 + [0.0])


def test_tis_bad_input():
    old, rollout, mask = _lp()
    with pytest.raises(ValueError, match="level"):
        tis_weights(old, rollout, mask, level="seq")
    with pytest.raises(ValueError, match="rollout_log_prob has shape"):
        tis_weights(old, rollout[:, :2], mask)
    rollout[0, 0] = float("nan")
    with pytest.raises(ValueError, match="rollout_log_prob has 1 non-finite"):
        tis_weights(old, rollout, mask)
    assert tis_stats(tis_ratio(old, rollout, torch.zeros(2, 3)), torch.zeros(2, 3)) == {}
