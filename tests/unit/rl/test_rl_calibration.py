"""Calibrated clipping: identity when R = R_ref, quantile matching, upper modes, clamping, q = 0, the
default population, the pooled target, reference modes and checkpoint state."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fp8rl.config import CalibConfig, DAPOConfig
from fp8rl.rl import Calibrator, bounds_from_quantiles, calibrated_bounds, clip_stats, policy_loss

CL, CH = 0.2, 0.28


def _batch(seed=0, b=64, t=32, sigma=0.1):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(t // 2, t + 1, (b,), generator=g)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    log_r = torch.randn(b, t, generator=g, dtype=torch.float64) * sigma
    adv = torch.where(torch.rand(b, generator=g) < 0.5, -1.0, 1.0).double()
    return log_r.exp(), adv, mask, g


def test_equal_ratios_give_the_fixed_bounds():
    r, adv, mask, _ = _batch(sigma=0.2)  # plenty of tokens clipped by the reference, above and below
    for population in ("all", "neg"):
        for upper in ("proportional", "quantile"):
            got = calibrated_bounds(
                r, r, adv, mask, clip_low=CL, clip_high=CH, population=population, upper=upper
            )
            assert got == (1 - CL, 1 + CH)
    r, adv, mask, _ = _batch(sigma=0.05)  # nothing outside [0.8, 1.28]: q = 0, nothing to rebalance
    low, high = calibrated_bounds(r, r, adv, mask, clip_low=CL, clip_high=CH)
    assert high == 1 + CH and int(((r < low) & mask & (adv[:, None] < 0)).sum()) == 0


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


def test_q_zero_clips_nothing_below_and_keeps_the_fixed_upper_bound():
    r_ref, adv, mask, g = _batch(5, sigma=0.02)  # reference clips nothing
    neg = mask & (adv[:, None] < 0)
    for scale, case in ((40, "min(R) far below the clamp floor"), (4, "min(R) inside low_range"),
                        (2, "nothing below 1 - clip_low either")):  # fmt: skip
        r = (r_ref.log() * scale).exp()
        low, high = calibrated_bounds(r, r_ref, adv, mask, clip_low=CL, clip_high=CH)
        r_min = float(r[neg].min())
        assert high == 1 + CH, case  # not 1 + CH * (1 - min(R)) / CL: no looser trust region
        assert r_min * (1 - 1e-5) < low < r_min, case  # just under min(R): nothing clipped below
        assert int(((r < low) & neg).sum()) == 0, case
        assert int(((r.float() < low) & neg).sum()) == 0, case  # also for the same ratios in float32
    assert float((r_ref.log() * 40).exp()[neg].min()) < 0.5
    r_high = (r_ref.log() * 0.5).exp() * 1.5  # every A<0 ratio above 1: L stops at the clamp ceiling
    assert calibrated_bounds(r_high, r_ref, adv, mask, clip_low=CL, clip_high=CH) == (1.0, 1 + CH)


def test_proportional_upper_bound_comes_from_the_clamped_lower_bound():
    r_ref, adv, mask, g = _batch(4, sigma=0.15)
    r = (r_ref.log() * 5).exp()  # the unclamped quantile would be far below the floor
    for low_range in ((0.5, 1.0), (0.7, 1.0)):
        low, high = calibrated_bounds(r, r_ref, adv, mask, clip_low=CL, clip_high=CH, low_range=low_range)
        assert low == low_range[0] and high == pytest.approx(1 + CH * (1 - low_range[0]) / CL)


def test_neg_is_the_default_population():
    assert CalibConfig().population == "neg"
    assert Calibrator(CL, CH).options.population == "neg"
    r_ref, adv, mask, g = _batch(11, sigma=0.15)
    r = (r_ref.log() * 1.5).exp() * torch.where(adv[:, None] < 0, 1.0, 1.1).double()
    neg = calibrated_bounds(r, r_ref, adv, mask, clip_low=CL, clip_high=CH, population="neg")
    assert calibrated_bounds(r, r_ref, adv, mask, clip_low=CL, clip_high=CH) == neg
    every = calibrated_bounds(r, r_ref, adv, mask, clip_low=CL, clip_high=CH, population="all")
    assert every != neg
    # with 'neg' the A<0 tokens clipped under FP8 match those clipped under BF16 to the token
    pop = mask & (adv[:, None] < 0)
    assert abs(int(((r < neg[0]) & pop).sum()) - int(((r_ref < 1 - CL) & pop).sum())) <= 1


def test_empty_population_falls_back_to_fixed_bounds():
    r, _, mask, _ = _batch(6)
    adv = torch.ones(r.shape[0], dtype=torch.float64)  # no negative-advantage token
    assert calibrated_bounds(r, r, adv, mask, clip_low=CL, clip_high=CH, population="neg") == (1 - CL, 1 + CH)


def _shadow_update(seed, n_rows=8, t=16, sigma=0.12, wide=1.5):
    """One mini-batch: FP8 ratios, BF16 reference ratios, advantages, mask, and the shadow rows' mask."""
    r_ref, adv, mask, g = _batch(seed, b=n_rows * 4, t=t, sigma=sigma)
    r = (r_ref.log() * wide).exp()
    ref_mask = mask & (torch.arange(n_rows * 4) < n_rows)[:, None]  # the first quarter: shadow rows
    return r, r_ref, adv, mask, ref_mask


def _neg_counts(r_ref, adv, ref_mask):
    neg = ref_mask & (adv[:, None] < 0)
    return int(((r_ref < 1 - CL) & neg).sum()), int(neg.sum())


def test_calibrator_pools_the_reference_counts_over_updates():
    cal = Calibrator(CL, CH, momentum=0.5)
    num = den = 0.0
    for seed in range(4):
        r, r_ref, adv, mask, ref_mask = _shadow_update(20 + seed)
        k, n = _neg_counts(r_ref, adv, ref_mask)
        num, den = 0.5 * num + k, 0.5 * den + n  # EMA of the numerator and the denominator separately
        (low, high), m = cal.bounds(r, adv, mask, ref_ratio=r_ref, ref_mask=ref_mask)
        assert m["calib/target_q"] == pytest.approx(num / den) and m["calib/ref_tokens"] == pytest.approx(den)
        assert (low, high) == bounds_from_quantiles(r, adv, mask, num / den, clip_low=CL, clip_high=CH)
    # a mini-batch without shadow rows uses the pool as it is
    state = cal.state_dict()
    r, r_ref, adv, mask, ref_mask = _shadow_update(30)
    (_, _), m = cal.bounds(r, adv, mask, ref_ratio=r_ref, ref_mask=torch.zeros_like(ref_mask))
    assert m["calib/target_q"] == pytest.approx(num / den) and cal.state_dict() == state
    # before any reference token: the fixed bounds, no target
    (lo, hi), m = Calibrator(CL, CH).bounds(
        r, adv, mask, ref_ratio=r_ref, ref_mask=torch.zeros_like(ref_mask)
    )
    assert (lo, hi) == (1 - CL, 1 + CH) and "calib/target_q" not in m and "calib/ref_tokens" not in m


def test_pooling_trades_lag_for_a_steadier_small_sample_target():
    """~60 A<0 shadow tokens per update at a constant q ~ 1 %: one update's target is mostly 0 or 1/60,
    a pooled one (momentum 0.9) is within a fraction of q. The default (no pooling) is unbiased: its
    targets average to q, which is what sets the mean clip fraction."""
    g = torch.Generator().manual_seed(0)
    q_true, n_updates = 0.01, 400
    errors, means = {}, {}
    for momentum in (CalibConfig().momentum, 0.9):
        cal = Calibrator(CL, CH, momentum=momentum)
        targets = []
        for _ in range(n_updates):
            r_ref = torch.where(torch.rand(1, 60, generator=g) < q_true, 0.7, 1.05).double()
            r = r_ref * (1 + 0.05 * torch.randn(1, 60, generator=g, dtype=torch.float64))
            adv, mask = -torch.ones(1, dtype=torch.float64), torch.ones(1, 60, dtype=torch.bool)
            targets.append(cal.bounds(r, adv, mask, ref_ratio=r_ref)[1]["calib/target_q"])
        t = torch.tensor(targets[50:], dtype=torch.float64)
        errors[momentum] = float(((t - q_true) ** 2).mean().sqrt()) / q_true
        means[momentum] = float(t.mean())
    assert CalibConfig().momentum == 0.0
    assert errors[0.0] > 1.0  # a single update's estimate is off by more than q itself
    assert errors[0.9] < 0.5 * errors[0.0]
    assert means[0.0] == pytest.approx(q_true, rel=0.25)


def test_an_update_whose_reference_ratio_is_one_clips_nothing_and_leaves_the_pool():
    cal = Calibrator(CL, CH)
    r, r_ref, adv, mask, ref_mask = _shadow_update(40)
    cal.bounds(r, adv, mask, ref_ratio=r_ref, ref_mask=ref_mask)
    state = cal.state_dict()
    neg = mask & (adv[:, None] < 0)
    r2, _, _, _, _ = _shadow_update(41, wide=3.0)
    ones = torch.ones_like(r_ref)
    for kw in (
        {"ref_ratio": ones, "ref_mask": ref_mask},  # detected: the shadow tokens' ratio is exactly 1
        {"ref_ratio": ones, "ref_mask": torch.zeros_like(ref_mask), "ref_unchanged": True},  # told
    ):
        (low, high), m = cal.bounds(r2, adv, mask, **kw)
        assert int(((r2 < low) & neg).sum()) == 0 and high == 1 + CH
        assert m["calib/target_q"] == 0.0 and cal.state_dict() == state
    # the same holds with a run or static target: the policy has not moved, BF16 clips nothing
    for cal in (Calibrator(CL, CH, reference="run"), Calibrator(CL, CH, reference="static:0.1")):
        (low, high), _ = cal.bounds(r2, adv, mask, target_q=0.1, ref_unchanged=True)
        assert int(((r2 < low) & neg).sum()) == 0 and high == 1 + CH


def test_calibrator_state_resumes_bit_exactly(tmp_path):
    updates = [_shadow_update(50 + i) for i in range(6)]
    for upper in ("proportional", "quantile"):
        full = Calibrator(CL, CH, upper=upper)
        head = Calibrator(CL, CH, upper=upper)
        outs = [full.bounds(r, adv, m, ref_ratio=rr, ref_mask=rm) for r, rr, adv, m, rm in updates]
        for r, rr, adv, m, rm in updates[:3]:
            head.bounds(r, adv, m, ref_ratio=rr, ref_mask=rm)
        torch.save(head.state_dict(), tmp_path / "cal.pt")
        resumed = Calibrator(CL, CH, upper=upper)
        resumed.load_state_dict(torch.load(tmp_path / "cal.pt"))
        for (r, rr, adv, m, rm), out in zip(updates[3:], outs[3:], strict=True):
            assert resumed.bounds(r, adv, m, ref_ratio=rr, ref_mask=rm) == out
    with pytest.raises(ValueError, match="missing keys.*lo_den"):
        Calibrator(CL, CH).load_state_dict({"low": 0.8, "high": 1.2, "updates": 3})


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
    pos = mask & (adv[:, None] > 0)  # population neg: the upper target is over A>0 tokens
    assert abs(int(((r > hi) & pos).sum()) - 0.05 * int(pos.sum())) <= 1 and m["calib/target_q_high"] == 0.05
    with pytest.raises(ValueError, match="static"):
        Calibrator(0.2, 0.28, reference="static:0.1", upper="quantile")
    with pytest.raises(ValueError, match="reference"):
        Calibrator(0.2, 0.28, reference="bf16")


def test_calibrated_bounds_feed_policy_loss():
    r_ref, adv, mask, g = _batch(9, sigma=0.12)
    r = (r_ref.log() * 2).exp()
    bounds = calibrated_bounds(r, r_ref, adv, mask, clip_low=CL, clip_high=CH)
    lp = r.log().requires_grad_(True)
    loss, metrics = policy_loss(lp, torch.zeros_like(lp), adv, mask, bounds)
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
        r, r_ref, adv, mask, clip_low=CL, clip_high=CH, upper=upper, low_range=(1e-6, 1.0), population="all"
    )
    assert low <= 1.0 <= high
    k_ref = int((r_ref < 1 - CL).sum())
    assert int((r < low).sum()) == k_ref or low == 1.0  # exact unless clamped at the ceiling
    if upper == "quantile":
        k_hi = int((r_ref > 1 + CH).sum())
        assert int((r > high).sum()) == k_hi or high == 1.0


def test_upper_fixed_moves_only_the_lower_bound():
    """`upper: fixed` keeps U = 1 + clip_high whatever L does; `proportional` widens U as L falls."""
    r, r_ref, adv, mask, _ = _shadow_update(50, wide=3.0)
    kw = {"clip_low": CL, "clip_high": CH}
    low_f, high_f = calibrated_bounds(r, r_ref, adv, mask, upper="fixed", **kw)
    low_p, high_p = calibrated_bounds(r, r_ref, adv, mask, upper="proportional", **kw)
    assert low_f == low_p < 1 - CL  # a noisier FP8 ratio: the calibrated L moves down
    assert high_f == 1 + CH < high_p


def test_options_are_checked_once_and_frozen(monkeypatch):
    """A Calibrator checks its options when made (a bad one names the option) and holds them frozen; its
    per-update bounds do not check them again."""
    import dataclasses

    from fp8rl.rl import CalibOptions
    from fp8rl.rl import calibration as calib_mod

    for kwargs, word in (({"upper": "wide"}, "upper"), ({"population": "pos"}, "population"),
                         ({"low_range": (0.9, 0.5)}, "low_range")):  # fmt: skip
        with pytest.raises(ValueError, match=f"Calibrator: .*{word}"):
            Calibrator(CL, CH, **kwargs)
    cal = Calibrator(CL, CH, reference="static:0.02")
    assert cal.options == CalibOptions(CL, CH) and cal.options.fixed == (1 - CL, 1 + CH)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cal.options.upper = "quantile"  # type: ignore[misc]
    made = []
    monkeypatch.setattr(calib_mod, "CalibOptions", lambda *a: made.append(a) or CalibOptions(*a))
    ratio = torch.tensor([[0.7, 0.9, 1.1, 1.3]])
    adv, mask = torch.tensor([[-1.0, -1.0, 1.0, 1.0]]), torch.ones(1, 4, dtype=torch.bool)
    for _ in range(3):
        cal.bounds(ratio, adv, mask)
    assert made == []  # the update path reuses the run's options
    bounds_from_quantiles(ratio, adv, mask, 0.5, clip_low=CL, clip_high=CH)
    assert len(made) == 1  # the functional form checks its arguments on each call


def test_the_floor_binding_is_reported_where_calibration_cannot_complete():
    """`calib/floor_binds`: 1 when the bound matching the target lies under low_range's floor (FP8
    still clips more than the reference), 0 when the calibrated bound is inside the range, absent
    without a target."""
    adv = torch.full((1, 4), -1.0)
    mask = torch.ones(1, 4)
    # half the A<0 ratios far below 0.5: matching q = 0.5 would need L between 0.31 and 0.9, not < 0.5
    inside = torch.tensor([[0.30, 0.31, 0.90, 0.95]])
    # three quarters below 0.4: matching q = 0.5 needs L between 0.32 and 0.33, under the 0.5 floor
    under = torch.tensor([[0.30, 0.32, 0.33, 0.95]])
    cal = Calibrator(CL, CH, reference="static:0.5")
    (lo, _), m = cal.bounds(inside, adv, mask)
    assert m["calib/floor_binds"] == 0.0 and 0.5 <= lo <= 0.9
    (lo, _), m = cal.bounds(under, adv, mask)
    assert m["calib/floor_binds"] == 1.0 and lo == 0.5
    (_, _), m = Calibrator(CL, CH, reference="static:0").bounds(under, adv, mask)
    assert "calib/floor_binds" not in m
