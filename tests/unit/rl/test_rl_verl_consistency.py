"""Agreement with verl's semantics (verl/trainer/ppo/core_algos.py) to 1e-6, without importing verl.

The references below are scalar, loop-by-loop transcriptions of the math of verl's
`compute_grpo_outcome_advantage`, `compute_policy_loss_vanilla` (clip_ratio_c = 3.0), `agg_loss` and the
token-level TIS weight of its rollout correction (`min(exp(old - rollout), cap)` multiplying the loss),
in float64 python, so they share no code path with fp8rl.rl.
"""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from fp8rl.rl import ClipBounds, LossTerms, grpo_advantages, policy_loss, tis_weights


def verl_grpo(scores: list[float], index: list[int], eps: float, norm_by_std: bool) -> list[float]:
    groups: dict[int, list[float]] = {}
    for s, i in zip(scores, index, strict=True):
        groups.setdefault(i, []).append(s)
    out = []
    for s, i in zip(scores, index, strict=True):
        g = groups[i]
        mean, std = (0.0, 1.0) if len(g) == 1 else (statistics.fmean(g), statistics.stdev(g))
        out.append((s - mean) / (std + eps) if norm_by_std else s - mean)
    return out


def verl_vanilla_token_losses(lp, old, adv, low, high, clip_c, tis=None):
    rows = []
    for b in range(len(lp)):
        row = []
        for t in range(len(lp[b])):
            a = adv[b][t]
            ratio = math.exp(min(max(lp[b][t] - old[b][t], -20.0), 20.0))
            pg1 = -a * ratio
            pg2 = -a * min(max(ratio, 1 - low), 1 + high)
            c1 = max(pg1, pg2)
            c2 = min(-a * clip_c, c1)
            pg = c2 if a < 0 else c1
            if tis is not None:
                pg *= tis[b][t]
            row.append(pg)
        rows.append(row)
    return rows


def verl_agg(loss, mask, mode):
    if mode == "token-mean":
        num = sum(x * m for r, mr in zip(loss, mask, strict=True) for x, m in zip(r, mr, strict=True))
        return num / sum(sum(mr) for mr in mask)
    seq = []
    for r, mr in zip(loss, mask, strict=True):
        s = sum(x * m for x, m in zip(r, mr, strict=True))
        seq.append(s / sum(mr) if mode == "seq-mean-token-mean" else s)
    return sum(seq) / len(seq)


def _batch(seed: int, b: int = 6, t: int = 7):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).double()
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 4
    lp = old + torch.randn(b, t, generator=g, dtype=torch.float64) * 0.6  # ratios well outside [0.8, 1.28]
    rollout = old + torch.randn(b, t, generator=g, dtype=torch.float64) * 0.8
    return lp, old, rollout, mask


@pytest.mark.parametrize("norm_std", [True, False])
def test_grpo_advantages_match_verl(norm_std):
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 3, (32,), generator=g).double() + torch.rand(
        32, generator=g, dtype=torch.float64
    )
    rewards[8:16] = 1.0  # an all-equal group: advantage 0, std 0
    index = [i // 8 for i in range(32)]
    want = verl_grpo(rewards.tolist(), index, 1e-6, norm_std)
    got = grpo_advantages(rewards, 8, norm_std=norm_std, eps=1e-6)
    assert got.tolist() == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vanilla_loss_with_dual_clip_matches_verl(mode, seed):
    lp, old, _, mask = _batch(seed)
    adv = (
        torch.randn(lp.shape[0], generator=torch.Generator().manual_seed(100 + seed), dtype=torch.float64) * 2
    )
    adv_bt = adv[:, None].expand_as(lp)
    want = verl_agg(
        verl_vanilla_token_losses(lp.tolist(), old.tolist(), adv_bt.tolist(), 0.2, 0.28, 3.0),
        mask.tolist(),
        mode,
    )
    got, _ = policy_loss(lp, old, adv, mask, ClipBounds.fixed(0.2, 0.28), LossTerms(3.0, mode))
    assert got.item() == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_token_tis_weights_and_weighted_loss_match_verl(seed):
    lp, old, rollout, mask = _batch(seed)
    cap = 2.0
    want_w = [
        [min(math.exp(o - r), cap) if m else 0.0 for o, r, m in zip(ro, rr, mr, strict=True)]
        for ro, rr, mr in zip(old.tolist(), rollout.tolist(), mask.tolist(), strict=True)
    ]
    w = tis_weights(old, rollout, mask, cap=cap, level="token")
    assert w.tolist() == [pytest.approx(r, abs=1e-6) for r in want_w]
    assert any(x == cap for r in w.tolist() for x in r)  # truncation exercised

    adv = torch.linspace(-2, 2, lp.shape[0], dtype=torch.float64)
    adv_bt = adv[:, None].expand_as(lp).tolist()
    want = verl_agg(
        verl_vanilla_token_losses(lp.tolist(), old.tolist(), adv_bt, 0.2, 0.2, 3.0, tis=want_w),
        mask.tolist(),
        "token-mean",
    )
    got, _ = policy_loss(lp, old, adv, mask, ClipBounds.fixed(0.2, 0.2), LossTerms(clip_c=3.0), is_weights=w)
    assert got.item() == pytest.approx(want, abs=1e-6)
