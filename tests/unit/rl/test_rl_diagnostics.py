"""Diagnostics: clip fractions, quantiles, mismatch KL, phantom clipping, chunked entropy, spike detector,
gibberish rate."""

from __future__ import annotations

import math

import pytest
import torch

from fp8rl.config import StabilityConfig
from fp8rl.rl import (
    StabilityMonitor,
    clip_stats,
    entropy_from_logits,
    gibberish_rate,
    gibberish_reason,
    mismatch_kl,
    phantom_low_neg,
    ratio_quantiles,
)
from fp8rl.vocabulary import CLIP_METRICS


def test_clip_stats_by_hand_and_absent_when_not_applicable():
    ratio = torch.tensor([[0.5, 0.9, 1.5, 4.0], [0.7, 1.3, 1.0, 9.9]])
    adv = torch.tensor([[-1.0, -1.0, -1.0, -1.0], [1.0, 1.0, 1.0, 1.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    s = clip_stats(ratio, adv, mask, 0.8, 1.2, clip_c=3.0)
    assert s == {
        "clip/low_neg": 1 / 4,
        "clip/high_pos": 1 / 3,
        "clip/dual": 1 / 4,
        "clip/low_all": 2 / 7,
        "clip/high_all": 3 / 7,
    }
    assert tuple(s) == CLIP_METRICS  # the verl import passes these through by that list
    s = clip_stats(ratio[:1], torch.tensor([-1.0]), mask[:1], 0.8, 1.2)
    assert "clip/high_pos" not in s and "clip/dual" not in s and s["clip/low_neg"] == 1 / 4
    assert clip_stats(ratio, adv, torch.zeros(2, 4), 0.8, 1.2) == {}


def test_ratio_quantiles_match_torch_quantile():
    g = torch.Generator().manual_seed(0)
    r = torch.randn(8, 50, generator=g).exp()
    mask = torch.rand(8, 50, generator=g) < 0.7
    got = ratio_quantiles(r, mask)
    want = torch.quantile(r[mask].double(), torch.tensor([0.01, 0.5, 0.99], dtype=torch.float64))
    assert [got["ratio/p01"], got["ratio/p50"], got["ratio/p99"]] == pytest.approx(want.tolist())
    assert ratio_quantiles(r, torch.zeros(8, 50)) == {}


def test_mismatch_kl_k1_k3():
    trainer = torch.tensor([[-1.0, -2.0, 5.0]])
    rollout = torch.tensor([[-1.5, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 0]])
    got = mismatch_kl(trainer, rollout, mask)
    d = [0.5, -1.0]
    assert got["mismatch/kl_k1"] == pytest.approx(sum(-x for x in d) / 2)
    assert got["mismatch/kl_k3"] == pytest.approx(sum(math.exp(x) - x - 1 for x in d) / 2)
    same = mismatch_kl(trainer, trainer, mask)
    assert same == {"mismatch/kl_k1": 0.0, "mismatch/kl_k3": 0.0}


def test_phantom_low_neg_and_missed_neg():
    ratio = torch.tensor([[0.7, 0.7, 0.7, 0.9, 0.9, 0.7]])
    ref = torch.tensor([[0.9, 0.9, 0.7, 0.7, 0.9, 0.9]])
    adv = torch.tensor([[-1.0, -1.0, -1.0, -1.0, -1.0, 1.0]])
    got = phantom_low_neg(ratio, ref, adv, torch.ones(1, 6), 0.8, 0.8)
    # tokens 0, 1: FP8 clips, BF16 does not; token 3: BF16 clips, FP8 does not; token 2 both; 5 has A>0
    assert got == {"phantom/low_neg": 2 / 5, "phantom/missed_neg": 1 / 5}
    fp8_rate, bf16_rate = 3 / 5, 2 / 5  # the difference is the net excess clipping
    assert got["phantom/low_neg"] - got["phantom/missed_neg"] == pytest.approx(fp8_rate - bf16_rate)
    assert phantom_low_neg(ratio, ref, adv, torch.ones(1, 6), 0.8, 0.6) == {
        "phantom/low_neg": 3 / 5,
        "phantom/missed_neg": 0.0,
    }  # separate bounds: BF16 clips nothing below 0.6
    assert phantom_low_neg(ratio, ref, -adv.abs() * 0 + 1, torch.ones(1, 6), 0.8, 0.8) == {}


def test_entropy_matches_torch_distributions_and_masks():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 7, 40, generator=g) * 3
    logits[0, 0, :10] = float("-inf")
    mask = torch.ones(3, 7)
    mask[2, 4:] = 0
    h = entropy_from_logits(logits, mask, chunk_size=5)
    want = torch.distributions.Categorical(logits=logits).entropy() * mask
    assert torch.allclose(h, want, atol=1e-5)
    assert torch.isfinite(h).all() and h[2, 4:].eq(0).all()


def test_entropy_gradient_and_bounded_saved_memory():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(8, 32, 256, generator=g, requires_grad=True)
    mask = torch.ones(8, 32)
    saved: list[torch.Tensor] = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        h = entropy_from_logits(logits, mask, chunk_size=16)
    extra = sum(
        t.numel() * t.element_size()
        for t in saved
        if t.untyped_storage().data_ptr() != logits.untyped_storage().data_ptr()
    )
    full = logits.numel() * 4
    assert extra < full / 20  # a whole-tensor softmax would save >= the full [B, T, V] again
    h.sum().backward()
    ref_logits = logits.detach().clone().requires_grad_(True)
    torch.distributions.Categorical(logits=ref_logits).entropy().sum().backward()
    assert torch.allclose(logits.grad, ref_logits.grad, atol=1e-5)


def test_entropy_bad_input():
    with pytest.raises(ValueError, match=r"\[B, T, V\]"):
        entropy_from_logits(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="mask has shape"):
        entropy_from_logits(torch.zeros(2, 3, 4), torch.ones(3, 2))


def test_spike_detector_trips_after_m_consecutive_steps_and_resumes():
    mon = StabilityMonitor.from_config(
        StabilityConfig(entropy_spike_k=3.0, entropy_spike_m=3, baseline_steps=3)
    )
    seq = [1.0, 0.8, 1.2, 2.0, 3.5, 3.5, 1.0, 3.1, 3.2]
    out = [mon.update(i, {"entropy": e}) for i, e in enumerate(seq)]
    assert out == [None] * 9  # baseline 1.0; the streaks (2 and 2 steps above 3.0) stay below m = 3
    state = mon.state_dict()
    first = mon.update(9, {"entropy": 3.3})
    assert first.kind == "entropy_spike" and "steps 7-9" in first.reason
    assert mon.update(10, {"entropy": 0.1}) == first  # sticky
    resumed = StabilityMonitor(entropy_spike_k=3.0, entropy_spike_m=3, baseline_steps=3)
    resumed.load_state_dict(state)
    assert resumed.update(8, {"entropy": 99.0}) is None  # a replayed step is ignored
    assert resumed.update(9, {"entropy": 3.3}) == first


def test_spike_detector_non_finite():
    d = StabilityMonitor(baseline_steps=5).update(0, {"entropy": float("nan")})
    assert d.kind == "non_finite" and "non-finite" in d.reason


def test_gibberish():
    texts = [
        "57",
        "To add 47 and 38: 40 + 30 = 70, 7 + 8 = 15, so the answer is 85.",
        "1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1",
        "the answer is " * 20,
        "ok\x00\x01\ufffd\ufffd",
        "banana",
    ]
    assert [gibberish_reason(t) for t in texts] == [
        None,
        None,
        "repetition",
        "repetition",
        "unprintable",
        None,
    ]
    assert gibberish_rate(texts, [True, True, True, True, True, False]) == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="format_ok"):
        gibberish_rate(texts, [True])
    with pytest.raises(ValueError, match="no texts"):
        gibberish_rate([])
