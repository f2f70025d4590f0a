"""The mismatch in the field's units (fp8rl.rl.mismatch) against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from fp8rl.rl.corrections import mismatch_aliases
from fp8rl.rl.diagnostics import mismatch_kl
from fp8rl.rl.mismatch import UNITS, mismatch_units


def test_units_by_hand():
    a = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -9.0, 0.0]])
    b = torch.tensor([[-1.1, -1.8, -7.0], [-0.5, -9.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    d = [0.1, -0.2, 0.0]  # the valid tokens' a - b (the masked -3 vs -7 is ignored)
    got = mismatch_units(a, b, mask, "mismatch")
    assert list(got) == [f"mismatch/{u}" for u in UNITS]
    assert got["mismatch/kl_k3"] == pytest.approx(sum(math.exp(x) - x - 1 for x in d) / 3, rel=1e-6)
    assert got["mismatch/abs_dlogp"] == pytest.approx(0.1, rel=1e-6)
    assert got["mismatch/tmpe"] == pytest.approx(sum(math.exp(abs(x)) for x in d) / 3, rel=1e-6)
    assert got["mismatch/dlogp"] == pytest.approx(-0.1 / 3, rel=1e-6)


def test_units_agree_with_the_other_names():
    """k3 equals mismatch/kl_k3 and tmpe NeMo-RL's token_mult_prob_error, bit for bit."""
    g = torch.Generator().manual_seed(0)
    a = -torch.rand(4, 7, generator=g) * 3
    b = a + 0.05 * torch.randn(4, 7, generator=g)
    mask = (torch.rand(4, 7, generator=g) > 0.3).float()
    got = mismatch_units(a, b, mask, "shadow_mismatch")
    assert got["shadow_mismatch/kl_k3"] == mismatch_kl(a, b, mask)["mismatch/kl_k3"]
    assert got["shadow_mismatch/tmpe"] == mismatch_aliases(a, b, mask)["token_mult_prob_error"]
    # a small-d check of the rule of thumb KL ≈ E[d²]/2
    d = (a - b)[mask > 0].double()
    assert got["shadow_mismatch/kl_k3"] == pytest.approx(float((d**2).mean() / 2), rel=0.1)


def test_identical_scorings_and_no_tokens():
    a = torch.randn(2, 3)
    got = mismatch_units(a, a.clone(), torch.ones(2, 3), "mismatch")
    assert got == {
        "mismatch/kl_k3": 0.0,
        "mismatch/abs_dlogp": 0.0,
        "mismatch/tmpe": 1.0,
        "mismatch/dlogp": 0.0,
    }
    assert mismatch_units(a, a, torch.zeros(2, 3), "mismatch") == {}


def test_non_finite_is_refused():
    a = torch.tensor([[0.0, float("nan")]])
    with pytest.raises(ValueError, match="mismatch_units"):
        mismatch_units(a, torch.zeros(1, 2), torch.ones(1, 2), "mismatch")
