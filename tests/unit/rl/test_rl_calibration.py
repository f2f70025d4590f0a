"""Calibrated clipping (DESIGN.md §5): identity when R = R_ref, quantile matching, upper modes, clamping,
q = 0, EMA, reference modes and checkpoint state."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fp8rl.config import CalibConfig, DAPOConfig
from fp8rl.rl import Calibrator, calibrated_bounds, clip_stats, policy_loss

CL, CH = 0.2, 0.28


def _batch(seed=0, b=64, t=32, sigma=0.1):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(t // 2, t + 1, (b,), generator=g)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    log_r = torch.randn(b, t, generator=g, dtype=torch.float64) * sigma
    adv = torch.where(torch.rand(b, generator=g) < 0.5, -1.0, 1.0).double()
    return log_r.exp(), adv, mask, g


def test_equal_ratios_give_the_fixed_bounds():
    r, adv, mask, _ = _batch(sigma=0.05)  # nothing outside [0.8, 1.28]: q = 0 and q_hi = 0
    low, high = calibrated_bounds(r, r, adv, mask, clip_low=CL, clip_high=CH)
    assert (low, high) == pytest.approx((1 - CL, 1 + CH))
    r, adv, mask, _ = _batch(sigma=0.2)  # plenty of tokens clipped by the reference, above and below
    for population in ("all", "neg"):
        for upper in ("proportional", "quantile"):
            got = calibrated_bounds(
                r, r, adv, mask, clip_low=CL, clip_high=CH, population=population, upper=upper
            )
            assert got == (1 - CL, 1 + CH)


@pytest.mark.parametrize("population", ["all", "neg"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_under_widened_noise_the_fraction_below_L_is_q_within_one_token(population, seed):
    r_ref, adv, mask, g = _batch(seed, sigma=0.12)
    r = (r_ref.log() + torch.randn(r_ref.shape, generator=g, dtype=torch.float64) * 0.15).exp()
    low, high = calibrated_bounds(
        r, r_ref, adv, mask, clip_low=CL, clip_high=CH, population=population, low_range=(0.3, 1.0)
    )
    pop = mask & (adv[:, None] < 0) if population == "neg" else mask
    n = int(pop.sum())
    q = int(((r_ref < 1 - CL) & pop).sum()) / n
    below = int(((r < low) & pop).sum())
    assert 0 < q < 0.2
    assert abs(below - q * n) <= 1.0
    assert low < 1 - CL  # the noisy ratios are wider: the bound moves out
    assert high == pytest.approx(1 + CH * (1 - low) / CL)
    fixed_below = int(((r < 1 - CL) & pop).sum())
    assert fixed_below > below + 0.5 * q * n  # without calibration FP8 clips far more


def test_quantile_upper_bound_matches_the_reference_fraction_above():
    r_ref, adv, mask, g = _batch(3, sigma=0.15)
    r = (r_ref.log() * 1.6).exp()
    low, high = calibrated_bounds(r, r_ref, adv, mask, clip_low=CL, clip_high=CH, upper="quantile")
    n = int(mask.sum())
    q_hi = int(((r_ref > 1 + CH) & mask).sum()) / n
    assert q_hi > 0.01
    assert abs(int(((r > high) & mask).sum()) - q_hi * n) <= 1.0
    assert high > 1 + CH
    # population 'neg': the upper target is counted over A>0 tokens
    low, high = calibrated_bounds(
        r, r_ref, adv, mask, clip_low=CL, clip_high=CH, upper="quantile", population="neg"
    )
    pos = mask & (adv[:, None] > 0)
    q_pos = int(((r_ref > 1 + CH) & pos).sum()) / int(pos.sum())
    assert abs(int(((r > high) & pos).sum()) - q_pos * int(pos.sum())) <= 1.0


def test_clamping_to_low_range():
    r_ref, adv, mask, g = _batch(4, sigma=0.15)
    r = (r_ref.log() * 5).exp()  # far wider: the unclamped quantile would be far below 0.7
    low, high = calibrated_bounds(r, r_ref, adv, mask, clip_low=CL, clip_high=CH, low_range=(0.7, 1.0))
    assert low == 0.7 and high == pytest.approx(1 + CH * 0.3 / CL)
    r_narrow = (r_ref.log() * 0.1).exp()  # narrower than the reference: quantile near 1
    low, _ = calibrated_bounds(r_narrow, r_ref, adv, mask, clip_low=CL, clip_high=CH, low_range=(0.5, 0.9))
    assert low == 0.9


def test_q_zero_clips_nothing():
    r_ref, adv, mask, g = _batch(5, sigma=0.02)  # reference clips nothing
    r = (r_ref.log() * 40).exp()  # FP8 ratios spread far below 0.5
    low, high = calibrated_bounds(r, r_ref, adv, mask, clip_low=CL, clip_high=CH)
    assert low == pytest.approx(float(r[mask].min())) and low < 0.5
    assert int(((r < low) & mask).sum()) == 0
    r_mid = (r_ref.log() * 4).exp()  # min(R) between the clamp floor and 1 - clip_low
    assert 0.5 < float(r_mid[mask].min()) < 1 - CL
    low, _ = calibrated_bounds(r_mid, r_ref, adv, mask, clip_low=CL, clip_high=CH)
    assert low == pytest.approx(float(r_mid[mask].min()))
    r_tight = (r_ref.log() * 2).exp()  # nothing below 1 - clip_low either: the fixed bounds stay
    assert calibrated_bounds(r_tight, r_ref, adv, mask, clip_low=CL, clip_high=CH) == (1 - CL, 1 + CH)


def test_empty_population_falls_back_to_fixed_bounds():
    r, _, mask, _ = _batch(6)
    adv = torch.ones(r.shape[0], dtype=torch.float64)  # no negative-advantage token
    assert calibrated_bounds(r, r, adv, mask, clip_low=CL, clip_high=CH, population="neg") == (1 - CL, 1 + CH)


def test_calibrator_ema_and_state_roundtrip():
    cal = Calibrator(CL, CH, reference="static:0.1", momentum=0.5)
    r1, adv, mask, g = _batch(7, sigma=0.3)
    (l1, h1), m1 = cal.bounds(r1, adv, mask)
    assert m1["calib/target_q"] == 0.1 and m1["calib/low"] == l1 and m1["calib/high"] == h1
    r2 = (r1.log() * 0.5).exp()
    raw2 = Calibrator(CL, CH, reference="static:0.1").bounds(r2, adv, mask)[0]
    state = cal.state_dict()
    (l2, h2), _ = cal.bounds(r2, adv, mask)
    assert l2 == pytest.approx(0.5 * l1 + 0.5 * raw2[0])
    assert h2 == pytest.approx(0.5 * h1 + 0.5 * raw2[1])
    resumed = Calibrator(CL, CH, reference="static:0.1", momentum=0.5)
    resumed.load_state_dict(state)
    assert resumed.bounds(r2, adv, mask)[0] == (l2, h2)


def test_calibrator_reference_modes():
    r_ref, adv, mask, g = _batch(8, sigma=0.15)
    r = (r_ref.log() * 1.5).exp()
    algo = DAPOConfig()
    shadow = Calibrator.from_config(CalibConfig(), clip_low=algo.clip_low, clip_high=algo.clip_high)
    (low, high), metrics = shadow.bounds(r, adv, mask, ref_ratio=r_ref)
    assert (low, high) == calibrated_bounds(r, r_ref, adv, mask, clip_low=0.2, clip_high=0.28)
    q = metrics["calib/target_q"]
    run = Calibrator(0.2, 0.28, reference="run")
    assert run.bounds(r, adv, mask, target_q=q)[0] == pytest.approx((low, high))
    fresh = Calibrator(0.2, 0.28, reference="run")
    (lo, hi), m = fresh.bounds(r, adv, mask, target_q=None)  # no target this step: fixed, no target metric
    assert (lo, hi) == (0.8, 1.28) and "calib/target_q" not in m
    with pytest.raises(ValueError, match="needs ref_ratio"):
        shadow.bounds(r, adv, mask)
    quant = Calibrator(0.2, 0.28, reference="run", upper="quantile")
    (lo, hi), m = quant.bounds(r, adv, mask, target_q=0.1)  # the bf16 run lacked an upper target this step
    assert hi == 1.28 and lo < 0.8 and "calib/target_q_high" not in m
    (lo, hi), m = quant.bounds(r, adv, mask, target_q=0.1, target_q_high=0.05)
    assert (
        abs(int(((r > hi) & mask).sum()) - 0.05 * int(mask.sum())) <= 1 and m["calib/target_q_high"] == 0.05
    )
    with pytest.raises(ValueError, match="static"):
        Calibrator(0.2, 0.28, reference="static:0.1", upper="quantile")
    with pytest.raises(ValueError, match="reference"):
        Calibrator(0.2, 0.28, reference="bf16")


def test_calibrated_bounds_feed_policy_loss():
    r_ref, adv, mask, g = _batch(9, sigma=0.12)
    r = (r_ref.log() * 2).exp()
    bounds = calibrated_bounds(r, r_ref, adv, mask, clip_low=CL, clip_high=CH)
    lp = r.log().requires_grad_(True)
    loss, metrics = policy_loss(lp, torch.zeros_like(lp), adv, mask, bounds=bounds)
    loss.backward()
    clipped = ((r < bounds[0]) & (adv[:, None] < 0)) | ((r > bounds[1]) & (adv[:, None] > 0))
    assert torch.equal((lp.grad == 0) & mask, clipped & mask)
    assert metrics["clip/low_all"] < clip_stats(r, adv, mask, 1 - CL, 1 + CH)["clip/low_all"]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300),
    ref_scale=st.floats(0.01, 0.5),
    fp8_scale=st.floats(0.01, 1.0),
    seed=st.integers(0, 10_000),
    upper=st.sampled_from(["proportional", "quantile"]),
)
def test_property_clipped_counts_match_the_reference_to_the_token(n, ref_scale, fp8_scale, seed, upper):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(1, n, generator=g, dtype=torch.float64)
    r_ref, r = (z * ref_scale).exp(), (torch.randn(1, n, generator=g, dtype=torch.float64) * fp8_scale).exp()
    mask, adv = torch.ones(1, n, dtype=torch.bool), torch.ones(1, dtype=torch.float64)
    low, high = calibrated_bounds(
        r, r_ref, adv, mask, clip_low=CL, clip_high=CH, upper=upper, low_range=(1e-6, 1.0)
    )
    assert low <= 1.0 <= high
    k_ref = int((r_ref < 1 - CL).sum())
    assert int((r < low).sum()) == k_ref or low == 1.0  # exact unless clamped at the ceiling
    if upper == "quantile":
        k_hi = int((r_ref > 1 + CH).sum())
        assert int((r > high).sum()) == k_hi or high == 1.0
