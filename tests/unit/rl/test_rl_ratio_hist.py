"""RatioHistogram: fixed log bins that agree with numpy, end buckets for out-of-range ratios, the A<0
population, and a state that round-trips for resumed runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fp8rl.rl import RatioHistogram
from fp8rl.rl.ratio_hist import EDGES, N_BINS


def test_counts_match_numpy_and_keep_out_of_range_ratios():
    g = torch.Generator().manual_seed(0)
    ratio = torch.exp(torch.randn(8, 16, generator=g) * 0.6)
    ref = torch.exp(torch.randn(8, 16, generator=g) * 0.2)
    mask = (torch.rand(8, 16, generator=g) > 0.3).float()
    adv = torch.randn(8, generator=g)
    h = RatioHistogram()
    h.add(ratio, ref, adv, mask)
    d = h.as_dict()
    valid = ratio[mask.bool()].double().numpy()
    inner, _ = np.histogram(valid, bins=EDGES.numpy())
    counts = np.array(d["counts"]["fp8/all"])
    # numpy closes the last bin on the right; bucketize puts a value equal to an edge in the upper bin
    assert counts.sum() == d["tokens"] == int(mask.sum())
    assert counts[0] == (valid < EDGES[0].item()).sum() and counts[-1] == (valid >= EDGES[-1].item()).sum()
    np.testing.assert_array_equal(counts[1:-1], inner)
    neg = (adv < 0).unsqueeze(-1).expand_as(mask) & mask.bool()
    assert sum(d["counts"]["bf16_shadow/neg"]) == sum(d["counts"]["fp8/neg"]) == int(neg.sum())
    assert len(d["edges"]) == N_BINS + 1 and len(counts) == N_BINS + 2


def test_state_round_trip_and_accumulation():
    ratio = torch.tensor([[0.5, 1.0, 2.0]])
    mask = torch.ones(1, 3)
    a, b = RatioHistogram(), RatioHistogram()
    a.add(ratio, ratio, torch.tensor([-1.0]), mask)
    b.load_state_dict(a.state_dict())
    b.add(ratio, ratio, torch.tensor([1.0]), mask)
    assert b.tokens == 6 and a.tokens == 3
    assert sum(b.as_dict()["counts"]["fp8/neg"]) == 3


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="one shape"):
        RatioHistogram().add(torch.ones(2, 3), torch.ones(2, 4), torch.zeros(2), torch.ones(2, 3))
