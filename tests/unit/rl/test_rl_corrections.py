"""Each mismatch correction and the cross-framework mismatch metrics against hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from fp8rl.rl.corrections import icepop_weights, mis_keep, mismatch_aliases, rollout_correction
from fp8rl.vocabulary import CORRECTIONS, MISMATCH_ALIASES, VARIANT_SPECS


def _lp():
    # d = old - rollout: row 0 = [1, -1, 0]; row 1 = [0.2, -0.1, pad]
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]], dtype=torch.float64)
    rollout = torch.tensor([[-2.0, -1.0, -0.5], [-1.2, -0.9, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    return old, rollout, mask


def test_token_tis_is_todays_tis():
    old, rollout, mask = _lp()
    c = rollout_correction("tis", old, rollout, mask, cap=2.0)
    assert c.keep is None
    assert c.weights.tolist() == [
        pytest.approx([2.0, math.exp(-1), 1.0]),
        pytest.approx([math.exp(0.2), math.exp(-0.1), 0.0]),
    ]
    assert c.metrics["tis/clipped"] == pytest.approx(1 / 5)


def test_sequence_tis_weights_every_token_with_the_capped_product():
    old, rollout, mask = _lp()
    c = rollout_correction("seq_tis", old, rollout, mask, cap=1.1)
    # row 0: exp(1 - 1 + 0) = 1; row 1: exp(0.1) = 1.105 > 1.1 -> 1.1
    assert c.weights.tolist() == [pytest.approx([1.0] * 3), pytest.approx([1.1, 1.1, 0.0])]
    assert c.metrics["tis/clipped"] == pytest.approx(2 / 5)
    assert c.metrics["tis/mean"] == pytest.approx((3 + 2.2) / 5)


def test_icepop_keeps_the_raw_ratio_inside_the_band_and_zeroes_the_rest():
    old, rollout, mask = _lp()
    w = icepop_weights(old, rollout, mask, band=(0.5, 2.0))
    # ratios: e (out), 1/e (out), 1 (in); e^0.2 (in), e^-0.1 (in)
    assert w.tolist() == [pytest.approx([0.0, 0.0, 1.0]), pytest.approx([math.exp(0.2), math.exp(-0.1), 0.0])]
    c = rollout_correction("icepop", old, rollout, mask, icepop=(0.5, 2.0))
    assert c.keep is None and torch.equal(c.weights, w)
    assert c.metrics["tis/masked"] == pytest.approx(2 / 5)
    assert c.metrics["tis/mean"] == pytest.approx((1 + math.exp(0.2) + math.exp(-0.1)) / 5)
    # the band is inclusive: a wide band keeps every token's untruncated ratio (e > cap stays e)
    wide = icepop_weights(old, rollout, mask, band=(1 / math.e - 1e-9, math.e + 1e-9))
    assert wide[0, 0].item() == pytest.approx(math.e)


def test_mis_drops_sequences_whose_geometric_mean_ratio_leaves_the_band():
    old, rollout, mask = _lp()
    # geometric means: row 0 exp((1 - 1 + 0) / 3) = 1; row 1 exp((0.2 - 0.1) / 2) = exp(0.05) = 1.051
    assert mis_keep(old, rollout, mask, band=(0.99, 1.01)).tolist() == [True, False]
    assert mis_keep(old, rollout, mask, band=(0.99, 1.06)).tolist() == [True, True]
    c = rollout_correction("mis", old, rollout, mask, cap=2.0, mis=(0.99, 1.01))
    assert c.keep.tolist() == [True, False]
    # kept rows get token TIS; dropped rows weight 0
    assert c.weights.tolist() == [pytest.approx([2.0, math.exp(-1), 1.0]), pytest.approx([0.0, 0.0, 0.0])]
    assert c.metrics["tis/seq_masked"] == pytest.approx(1 / 2)
    assert c.metrics["tis/masked"] == pytest.approx(2 / 5)
    assert c.metrics["tis/mean"] == pytest.approx((2 + math.exp(-1) + 1) / 3)


def test_no_correction_and_bad_input():
    old, rollout, mask = _lp()
    c = rollout_correction("none", old, rollout, mask)
    assert c.weights is None and c.keep is None and c.metrics == {}
    with pytest.raises(ValueError, match="unknown correction"):
        rollout_correction("gtis", old, rollout, mask)
    with pytest.raises(ValueError, match="band"):
        icepop_weights(old, rollout, mask, band=(2.0, 0.5))
    with pytest.raises(ValueError, match="band"):
        mis_keep(old, rollout, mask, band=(0.0, 1.0))


def test_mismatch_aliases_by_hand():
    old, rollout, mask = _lp()
    # trainer = old: d = [1, -1, 0 | 0.2, -0.1]
    got = mismatch_aliases(old, rollout, mask)
    assert set(got) == set(MISMATCH_ALIASES)
    assert got["token_mult_prob_error"] == pytest.approx((math.e * 2 + 1 + math.exp(0.2) + math.exp(0.1)) / 5)
    assert got["rollout_corr/kl"] == pytest.approx(-(1 - 1 + 0 + 0.2 - 0.1) / 5)
    assert got["train_rollout_logprob_abs_diff"] == pytest.approx(((2 / 3) + (0.3 / 2)) / 2)
    k3 = [math.expm1(x) - x for x in (1, -1, 0, 0.2, -0.1)]
    assert got["mismatch_kl"] == pytest.approx(sum(k3) / 5)
    assert mismatch_aliases(old, rollout, torch.zeros_like(mask)) == {}


def test_every_correction_has_a_variant_and_the_first_ones_one_with_calibration():
    for kind in CORRECTIONS:
        specs = [s for s in VARIANT_SPECS.values() if s.fp8 and s.correction == kind]
        want = {False, True} if kind in ("none", "tis", "seq_tis", "mis", "icepop") else {False}
        assert {s.calib for s in specs} == want, kind
    assert VARIANT_SPECS["fp16"].fp16 and not VARIANT_SPECS["fp16"].fp8
