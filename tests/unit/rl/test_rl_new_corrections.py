"""The corrections of issue 56 against hand-computed cases: adaptive IcePop's band, score centering's
coefficient and gradient, QuRL's adaptive clip range; and the registry that holds them."""

from __future__ import annotations

import math

import pytest
import torch

from fp8rl.rl import ClipBounds
from fp8rl.rl.corrections import REGISTRY, get_correction, register_correction, rollout_correction
from fp8rl.rl.corrections.icepop_adaptive import adaptive_band
from fp8rl.rl.corrections.qurl import qurl_bounds
from fp8rl.rl.corrections.scorecenter import centering_coefficients, centering_loss
from fp8rl.vocabulary import CORRECTIONS, VARIANT_SPECS


def test_every_name_is_registered_once_and_every_variant_correction_is_known():
    assert set(REGISTRY) == set(CORRECTIONS)
    assert {s.correction for s in VARIANT_SPECS.values()} <= set(REGISTRY)
    with pytest.raises(ValueError, match="registered twice"):
        register_correction("tis")(lambda i, o: None)
    with pytest.raises(ValueError, match="not in fp8rl.vocabulary.CORRECTIONS"):
        register_correction("gtis")(lambda i, o: None)
    with pytest.raises(ValueError, match="unknown correction 'gtis'"):
        get_correction("gtis")
    assert get_correction("scorecenter").needs_distributions
    assert get_correction("qurl").needs_shadow and not get_correction("tis").needs_shadow


def _logs(ratios: list[float]):
    """One sequence whose rollout log-probs give exactly these ratios against old = log 0.5."""
    old = torch.full((1, len(ratios)), math.log(0.5), dtype=torch.float64)
    rollout = old - torch.log(torch.tensor([ratios], dtype=torch.float64))
    return old, rollout, torch.ones(1, len(ratios))


def test_adaptive_icepop_is_icepop_while_the_fixed_band_masks_little():
    # 100 tokens, mask_frac 0.02: at most k = 1 masked per side; one token out on each side -> fixed band
    ratios = [0.3] + [1.0] * 98 + [7.0]
    old, rollout, mask = _logs(ratios)
    c = rollout_correction("icepop_adaptive", old, rollout, mask, icepop=(0.5, 5.0), icepop_mask_frac=0.02)
    fixed = rollout_correction("icepop", old, rollout, mask, icepop=(0.5, 5.0))
    assert torch.equal(c.weights, fixed.weights)
    assert c.metrics["icepop/low"] == 0.5 and c.metrics["icepop/high"] == 5.0
    assert c.metrics["tis/masked"] == pytest.approx(0.02)


def test_adaptive_icepop_widens_the_band_as_the_gap_widens():
    # 100 tokens, k = 1: three below 0.5 (0.1, 0.2, 0.3) and three above 5 (6, 8, 9)
    ratios = [0.1, 0.2, 0.3] + [1.0] * 94 + [6.0, 8.0, 9.0]
    old, rollout, mask = _logs(ratios)
    lo, hi = adaptive_band(
        torch.tensor(ratios), torch.ones(100, dtype=torch.bool), band=(0.5, 5.0), mask_frac=0.02
    )
    assert (lo, hi) == pytest.approx((0.2, 8.0))  # the 2nd smallest and the 2nd largest ratio
    c = rollout_correction("icepop_adaptive", old, rollout, mask, icepop=(0.5, 5.0), icepop_mask_frac=0.02)
    w = c.weights[0]
    assert float(w[0]) == 0.0 and float(w[-1]) == 0.0  # only the most extreme token on each side
    assert float(w[1]) == pytest.approx(0.2) and float(w[-2]) == pytest.approx(8.0)
    assert c.metrics["tis/masked"] == pytest.approx(0.02)
    # fixed IcePop masks all six
    assert rollout_correction("icepop", old, rollout, mask, icepop=(0.5, 5.0)).metrics[
        "tis/masked"
    ] == pytest.approx(0.06)
    # mask_frac 0: nothing masked at all
    c0 = rollout_correction("icepop_adaptive", old, rollout, mask, icepop=(0.5, 5.0), icepop_mask_frac=0.0)
    assert c0.metrics["tis/masked"] == 0.0


def test_score_centering_coefficients_by_hand():
    # the two-token example: trainer p = (0.6, 0.4), sampler q = (0.5, 0.5)
    p_logits = torch.log(torch.tensor([[[0.6, 0.4]]]))
    q_logits = torch.log(torch.tensor([[[0.5, 0.5]]]))
    mask = torch.ones(1, 1, dtype=torch.bool)
    c, m = centering_coefficients(p_logits, q_logits, mask)
    torch.testing.assert_close(c, torch.tensor([[[0.5, 0.5]]]))
    assert m["sc/mass"] == pytest.approx(1.0) and m["sc/tv"] == pytest.approx(0.1)
    # TIS-weighted, cap 1.1: w = min(p/q, 1.1) = (1.1, 0.8) -> c = q w = (0.55, 0.4)
    c, m = centering_coefficients(p_logits, q_logits, mask, cap=1.1)
    torch.testing.assert_close(c, torch.tensor([[[0.55, 0.4]]]))
    assert m["sc/mass"] == pytest.approx(0.95)
    # padding gets no coefficient
    c, _ = centering_coefficients(p_logits, q_logits, torch.zeros(1, 1, dtype=torch.bool))
    assert float(c.abs().sum()) == 0.0


def test_score_centering_gradient_is_minus_a_times_the_sampler_expected_score():
    # logits z at one prefix; d/dz log softmax(z)_v = e_v - p: the score of v in logit space.
    # The term A * sum_v c_v log p_v has gradient A * sum_v c_v (e_v - p) = A (c - p * sum(c)).
    z = torch.log(torch.tensor([[[0.6, 0.4]]])).requires_grad_(True)
    c = torch.tensor([[[0.5, 0.5]]])
    adv = torch.tensor([2.0])
    mask = torch.ones(1, 1, dtype=torch.bool)
    centering_loss(z, c, adv, mask).backward()
    torch.testing.assert_close(z.grad, torch.tensor([[[2 * (0.5 - 0.6), 2 * (0.5 - 0.4)]]]))  # A (q - p)


def test_score_centering_through_the_registry():
    g = torch.Generator().manual_seed(0)
    old_logits, rollout_logits = torch.randn(2, 3, 5, generator=g), torch.randn(2, 3, 5, generator=g)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    gather = lambda lg: torch.log_softmax(lg, -1)[..., 0]  # noqa: E731
    old, rollout = gather(old_logits), gather(rollout_logits)
    with pytest.raises(ValueError, match="needs the trainer's and the sampler's logits"):
        rollout_correction("scorecenter", old, rollout, mask)
    sc = rollout_correction(
        "scorecenter", old, rollout, mask, old_logits=old_logits, rollout_logits=rollout_logits
    )
    assert sc.weights is None and sc.keep is None and sc.centering.shape == (2, 3, 5)
    torch.testing.assert_close(sc.centering[1, 2], torch.softmax(rollout_logits[1, 2], -1))
    assert float(sc.centering[0, 2].abs().sum()) == 0.0
    both = rollout_correction(
        "tis_scorecenter", old, rollout, mask, cap=2.0, old_logits=old_logits, rollout_logits=rollout_logits
    )
    tis = rollout_correction("tis", old, rollout, mask, cap=2.0)
    assert torch.equal(both.weights, tis.weights)
    assert {"tis/mean", "tis/clipped", "sc/mass", "sc/tv"} <= set(both.metrics)


def test_qurl_bounds_by_hand():
    fixed = ClipBounds.fixed(0.2, 0.28)
    ratio = torch.tensor([[math.exp(0.1), math.exp(-0.3), 1.0]])
    ref = torch.tensor([[1.0, 1.0, 5.0]])
    mask = torch.tensor([[1, 1, 0]])
    b, m = qurl_bounds(ratio, ref, mask, fixed)
    gap = (0.1 + 0.3) / 2
    assert m["qurl/gap"] == pytest.approx(gap)
    assert b == pytest.approx((0.8 * math.exp(-gap), 1.28 * math.exp(gap)))
    # no quantization noise: PPO's bounds; no shadow token: the fixed bounds and no metrics
    assert qurl_bounds(ref, ref, mask, fixed)[0] == pytest.approx(tuple(fixed))
    assert qurl_bounds(ratio, ref, torch.zeros_like(mask), fixed) == (fixed, {})
    c = rollout_correction("qurl", torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2))
    assert c.weights is None and c.keep is None and c.metrics == {}
