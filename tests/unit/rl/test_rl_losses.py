"""policy_loss / agg_loss / kl_penalty: every clip branch by hand, aggregations, padding, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fp8rl.rl import ClipBounds, LossTerms, agg_loss, kl_penalty, policy_loss

PPO = ClipBounds.fixed(0.2, 0.2)

L, U, C = 0.8, 1.2, 3.0

# (advantage, ratio, clip_c, expected per-token loss, expected d loss / d log_prob)
# d(-A r)/d log_prob = -A r where the unclipped branch is active, 0 where the loss is a constant.
BRANCHES = [
    pytest.param(2.0, 0.5, None, -1.0, -1.0, id="A>0 below L: not clipped"),
    pytest.param(2.0, 1.0, None, -2.0, -2.0, id="A>0 inside"),
    pytest.param(2.0, 1.5, None, -2.4, 0.0, id="A>0 above U: clipped"),
    pytest.param(-2.0, 0.5, None, 1.6, 0.0, id="A<0 below L: clipped (zeroed gradient)"),
    pytest.param(-2.0, 1.0, None, 2.0, 2.0, id="A<0 inside"),
    pytest.param(-2.0, 1.5, None, 3.0, 3.0, id="A<0 above U: not clipped"),
    pytest.param(-2.0, 4.0, None, 8.0, 8.0, id="A<0 above clip_c without dual clip"),
    pytest.param(-2.0, 1.5, C, 3.0, 3.0, id="A<0 between U and clip_c: dual clip inactive"),
    pytest.param(-2.0, 4.0, C, 6.0, 0.0, id="A<0 above clip_c: dual clip"),
    pytest.param(-2.0, 0.5, C, 1.6, 0.0, id="A<0 below L with dual clip"),
    pytest.param(2.0, 4.0, C, -2.4, 0.0, id="A>0 above clip_c: dual clip is for A<0 only"),
    pytest.param(2.0, 0.5, C, -1.0, -1.0, id="A>0 below L with dual clip"),
]


@pytest.mark.parametrize("adv, ratio, clip_c, want_loss, want_grad", BRANCHES)
def test_every_branch_by_hand(adv, ratio, clip_c, want_loss, want_grad):
    old = torch.tensor([[-1.3]], dtype=torch.float64)
    lp = (old + math.log(ratio)).requires_grad_(True)
    adv_t = torch.tensor([adv], dtype=torch.float64)
    loss, _ = policy_loss(lp, old, adv_t, torch.ones(1, 1), PPO, LossTerms(clip_c=clip_c))
    loss.backward()
    assert loss.item() == pytest.approx(want_loss, abs=1e-12)
    assert lp.grad.item() == pytest.approx(want_grad, abs=1e-12)
    if want_grad == 0.0:
        assert lp.grad.item() == 0.0  # exactly zero where clipped


def test_explicit_bounds_override_clip_eps_and_gradient_zero_only_where_clipped():
    old = torch.zeros(1, 4, dtype=torch.float64)
    ratios = torch.tensor([[0.55, 0.65, 1.3, 1.5]], dtype=torch.float64)
    lp = ratios.log().requires_grad_(True)
    adv = torch.tensor([[-1.0, -1.0, 1.0, 1.0]], dtype=torch.float64)
    # default bounds 0.8/1.2 clip all four; calibrated (0.6, 1.4) clips only the 1st and 4th
    loss, metrics = policy_loss(lp, old, adv, torch.ones(1, 4), ClipBounds(0.6, 1.4))
    loss.backward()
    assert lp.grad[0].tolist() == pytest.approx([0.0, 0.65 / 4, -1.3 / 4, 0.0], abs=1e-12)
    assert loss.item() == pytest.approx((0.6 + 0.65 - 1.3 - 1.4) / 4)
    assert metrics["clip/low_neg"] == 0.5 and metrics["clip/high_pos"] == 0.5
    assert metrics["clip/low_all"] == 0.25 and "clip/dual" not in metrics


def test_is_weights_scale_per_token_and_are_detached():
    old = torch.zeros(1, 2)
    lp = torch.zeros(1, 2, requires_grad=True)  # r = 1
    w = torch.tensor([[0.5, 2.0]], requires_grad=True)
    loss, _ = policy_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 2), PPO, is_weights=w)
    loss.backward()
    assert loss.item() == pytest.approx(-(0.5 + 2.0) / 2)
    assert lp.grad[0].tolist() == pytest.approx([-0.25, -1.0])
    assert w.grad is None


def test_kl_and_entropy_terms():
    old = torch.zeros(2, 3)
    lp = torch.full((2, 3), -0.1, requires_grad=True)
    ref = torch.full((2, 3), -0.3)
    ent = torch.full((2, 3), 1.5)
    mask = torch.ones(2, 3)
    base, _ = policy_loss(lp, old, torch.tensor([1.0, -1.0]), mask, PPO)
    loss, metrics = policy_loss(
        lp,
        old,
        torch.tensor([1.0, -1.0]),
        mask,
        PPO,
        LossTerms(kl_coef=0.1, entropy_coef=0.01),
        ref_log_prob=ref,
        entropy=ent,
    )
    k3 = math.exp(-0.2) + 0.2 - 1.0
    assert metrics["loss/kl"] == pytest.approx(k3)
    assert metrics["loss/entropy"] == pytest.approx(1.5)
    assert loss.item() == pytest.approx(base.item() + 0.1 * k3 - 0.01 * 1.5, abs=1e-6)
    assert kl_penalty(lp, ref, "k1")[0, 0].item() == pytest.approx(0.2)


def test_three_aggregations_on_a_ragged_mask():
    loss_mat = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]])
    assert agg_loss(loss_mat, mask, "token-mean").item() == pytest.approx(21 / 5)
    assert agg_loss(loss_mat, mask, "seq-mean-token-mean").item() == pytest.approx((1.5 + 6.0) / 2)
    assert agg_loss(loss_mat, mask, "seq-mean-token-sum").item() == pytest.approx((3 + 18) / 2)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 6), min_size=1, max_size=5),
    extra_cols=st.integers(1, 4),
    extra_rows=st.integers(0, 2),
    mode=st.sampled_from(["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]),
    clip_c=st.sampled_from([None, 3.0]),
    seed=st.integers(0, 10_000),
)
def test_padding_never_changes_the_loss(lengths, extra_cols, extra_rows, mode, clip_c, seed):
    g = torch.Generator().manual_seed(seed)
    b, t = len(lengths), max(lengths)
    mask = torch.tensor([[1.0] * n + [0.0] * (t - n) for n in lengths])
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    lp = old + torch.randn(b, t, generator=g, dtype=torch.float64) * 0.3
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    w = torch.rand(b, t, generator=g, dtype=torch.float64) * 2

    def run(lp_, old_, adv_, mask_, w_):
        lp_ = lp_.clone().requires_grad_(True)
        loss, _ = policy_loss(lp_, old_, adv_, mask_, PPO, LossTerms(clip_c, mode), is_weights=w_)
        loss.backward()
        return loss.item(), lp_.grad

    want, want_grad = run(lp, old, adv, mask, w)
    junk = torch.tensor([float("nan"), float("inf"), -1e30, 7.0], dtype=torch.float64)

    def pad(x, fill_rows):
        cols = junk[torch.arange(x.shape[0] * extra_cols) % 4].reshape(x.shape[0], extra_cols)
        x = torch.cat([x, cols], dim=1)
        rows = junk[torch.arange(extra_rows * x.shape[1]) % 4].reshape(extra_rows, x.shape[1])
        return torch.cat([x, rows if fill_rows else rows.nan_to_num(0.0)], dim=0)

    pmask = torch.zeros(b + extra_rows, t + extra_cols)
    pmask[:b, :t] = mask
    padv = torch.cat([adv, torch.full((extra_rows,), float("nan"), dtype=torch.float64)])
    got, got_grad = run(pad(lp, True), pad(old, True), padv, pmask, pad(w, True))
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert torch.equal(got_grad[:b, :t], want_grad)
    assert torch.all(got_grad[pmask == 0] == 0)


def test_all_zero_mask_gives_zero_loss_that_backpropagates():
    lp = torch.randn(2, 3, requires_grad=True)
    loss, metrics = policy_loss(lp, torch.randn(2, 3), torch.tensor([1.0, -1.0]), torch.zeros(2, 3), PPO)
    loss.backward()
    assert loss.item() == 0.0 and torch.all(lp.grad == 0)
    assert metrics == {"loss/tokens": 0.0}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"log_prob": torch.zeros(2, 4)}, "log_prob has shape"),
        ({"advantages": torch.zeros(3)}, "advantages must be"),
        ({"response_mask": torch.full((2, 3), 0.5)}, "only 0 and 1"),
        ({"response_mask": torch.ones(6)}, r"must be \[B, T\]"),
        (
            {"log_prob": torch.tensor([[0.0, float("nan"), 0.0], [0.0, 0.0, 0.0]])},
            "log_prob has 1 non-finite",
        ),
        ({"advantages": torch.tensor([float("nan"), 1.0])}, "advantages has 3 non-finite"),
        ({"terms": LossTerms(kl_coef=0.1)}, "needs ref_log_prob"),
        ({"terms": LossTerms(entropy_coef=0.1)}, "needs entropy"),
    ],
)
def test_bad_input_is_a_clear_error(kwargs, match):
    args = {
        "log_prob": torch.zeros(2, 3),
        "old_log_prob": torch.zeros(2, 3),
        "advantages": torch.ones(2),
        "response_mask": torch.ones(2, 3),
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        policy_loss(
            args.pop("log_prob"),
            args.pop("old_log_prob"),
            args.pop("advantages"),
            args.pop("response_mask"),
            PPO,
            **args,
        )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"loss_agg_mode": "token-sum"}, "unknown loss_agg_mode"),
        ({"clip_c": 0.9}, "clip_c"),
        ({"kl_coef": -0.1}, "kl_coef and entropy_coef must be >= 0"),
        ({"kl_type": "k2"}, "unknown kl_type"),
    ],
)
def test_a_runs_loss_settings_are_checked_once_when_made(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LossTerms(**kwargs)


def test_unchecked_values_give_the_same_loss_and_skip_only_the_value_checks():
    g = torch.Generator().manual_seed(3)
    lp, old = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)
    adv, mask = torch.tensor([1.0, -0.5, 2.0]), torch.tensor([[1.0] * 5, [1.0] * 3 + [0.0] * 2, [1.0] * 5])
    checked, cm = policy_loss(lp, old, adv, mask, PPO, LossTerms(clip_c=3.0))
    unchecked, um = policy_loss(lp, old, adv, mask, PPO, LossTerms(clip_c=3.0), check_values=False)
    assert torch.equal(checked, unchecked) and cm == um
    w = torch.ones(3, 5)
    w[0, 0] = float("nan")
    with pytest.raises(ValueError, match="is_weights has 1 non-finite"):
        policy_loss(lp, old, adv, mask, PPO, is_weights=w)
    unchecked_nan, _ = policy_loss(lp, old, adv, mask, PPO, is_weights=w, check_values=False)
    assert not torch.isfinite(unchecked_nan)  # left to the caller's check of the loss
    with pytest.raises(ValueError, match="log_prob has shape"):  # shapes are checked either way
        policy_loss(lp[:, :4], old, adv, mask, PPO, check_values=False)


def test_nan_in_padding_is_fine():
    lp = torch.tensor([[-0.5, float("nan")]], requires_grad=True)
    loss, _ = policy_loss(
        lp, torch.tensor([[-0.5, float("nan")]]), torch.tensor([1.0]), torch.tensor([[1, 0]]), PPO
    )
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()
