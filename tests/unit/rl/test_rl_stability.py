"""Divergence detection: every kind of divergence, stickiness, exact resume, and short-answer gibberish."""

from __future__ import annotations

import math

import pytest

from fp8rl.config import StabilityConfig
from fp8rl.rl import DIVERGENCE_KINDS, StabilityMonitor, gibberish_rate, gibberish_reason

ALL_ON = dict(
    entropy_spike_k=3.0,
    entropy_spike_m=3,
    baseline_steps=3,
    entropy_collapse_frac=0.01,
    entropy_floor=1e-6,
    gibberish_max=0.5,
    reward_collapse_frac=0.5,
    reward_window=3,
    reward_min_peak=0.1,
    patience=3,
)


def feed(mon: StabilityMonitor, rows: list[dict], start: int = 1):
    return [mon.update(start + i, r) for i, r in enumerate(rows)]


def healthy(n: int) -> list[dict]:
    """A run that learns: entropy drifts down slowly, reward climbs, little gibberish."""
    return [
        {"entropy": 1.0 - 0.002 * i, "reward/mean": min(0.2 + 0.01 * i, 0.9), "gibberish/rate": 0.02}
        for i in range(n)
    ]


def test_a_healthy_run_never_diverges():
    mon = StabilityMonitor(**ALL_ON)
    assert feed(mon, healthy(200)) == [None] * 200


@pytest.mark.parametrize(
    ("kind", "tail", "step"),
    [
        ("non_finite", [{"entropy": math.nan, "reward/mean": 0.3}], 6),
        ("non_finite", [{"entropy": 1.0, "reward/mean": math.inf}], 6),
        ("entropy_spike", [{"entropy": 4.0, "reward/mean": 0.3}] * 3, 8),
        # the lr 0.3 collapse: entropy 1e-33 (reward and gibberish still look fine here)
        ("entropy_collapse", [{"entropy": 1e-33, "reward/mean": 0.3, "gibberish/rate": 0.0}] * 3, 8),
        ("gibberish", [{"entropy": 1.0, "reward/mean": 0.3, "gibberish/rate": 1.0}] * 3, 8),
        # reward 0.3 for 5 steps, then 0: the 3-step mean falls below 0.5 x 0.3 at step 7 (0.1), 3 steps on
        ("reward_collapse", [{"entropy": 1.0, "reward/mean": 0.0}] * 5, 9),
    ],
)
def test_each_kind_is_detected_with_its_reason_and_step(kind, tail, step):
    mon = StabilityMonitor(**ALL_ON)
    out = feed(mon, [{"entropy": 1.0, "reward/mean": 0.3, "gibberish/rate": 0.0}] * 5 + tail)
    d = out[-1]
    assert d is not None and d.kind == kind and d.step == step
    assert d.reason.startswith("non-finite" if kind == "non_finite" else kind.replace("_", " "))
    assert out.index(d) == step - 1  # reported from the step it was detected on, not before


def test_every_kind_is_covered():
    assert set(DIVERGENCE_KINDS) == {
        "non_finite",
        "entropy_spike",
        "entropy_collapse",
        "gibberish",
        "reward_collapse",
    }


def test_streaks_must_be_consecutive_and_thresholds_none_turn_detectors_off():
    mon = StabilityMonitor(**ALL_ON)
    g = [{"entropy": 1.0, "gibberish/rate": r} for r in (0.1, 0.9, 0.9, 0.1, 0.9, 0.9, 0.1)]
    assert feed(mon, g) == [None] * 7
    off = StabilityMonitor(
        **{**ALL_ON, "gibberish_max": None, "entropy_collapse_frac": None, "entropy_floor": None}
    )
    rows = [{"entropy": 1.0}] * 3 + [{"entropy": 1e-30, "gibberish/rate": 1.0}] * 10
    assert feed(off, rows) == [None] * 13


def test_a_collapse_inside_the_baseline_window_is_still_seen():
    """lr 0.3: the base model samples sanely at step 1, then entropy 1e-33, gibberish 1.0, reward 0 from
    step 2 on; the baseline window has no healthy median to compare with, the floor and step 1 do."""
    mon = StabilityMonitor(**{**ALL_ON, "baseline_steps": 5})
    rows = [{"entropy": 0.8, "reward/mean": 0.4, "gibberish/rate": 0.05}]
    rows += [{"entropy": 1e-33, "reward/mean": 0.0, "gibberish/rate": 1.0}] * 4
    d = feed(mon, rows)[-1]
    assert d is not None and d.kind == "entropy_collapse" and d.step == 4 and "floor" in d.reason
    no_floor = StabilityMonitor(**{**ALL_ON, "baseline_steps": 5, "entropy_floor": None})
    d = feed(no_floor, rows)[-1]
    assert d is not None and d.kind == "gibberish" and d.step == 4


def test_a_garbled_base_model_is_not_a_divergence():
    mon = StabilityMonitor(**ALL_ON)
    assert feed(mon, [{"entropy": 1.0, "gibberish/rate": 0.8}] * 10) == [None] * 10
    assert feed(mon, [{"entropy": 1.0, "gibberish/rate": 0.95}] * 3, start=11)[-1].kind == "gibberish"


def test_reward_collapse_needs_learning_first():
    """A run that never learned (best mean reward below reward_min_peak) has no reward to lose."""
    mon = StabilityMonitor(**ALL_ON)
    assert feed(mon, [{"reward/mean": 0.05}] * 5 + [{"reward/mean": 0.0}] * 10) == [None] * 15


def test_first_divergence_is_sticky():
    mon = StabilityMonitor(**ALL_ON)
    feed(mon, [{"entropy": 1.0, "gibberish/rate": 0.0}] * 3 + [{"entropy": 1.0, "gibberish/rate": 1.0}] * 3)
    first = mon.divergence
    assert first.kind == "gibberish" and first.step == 6
    later = feed(mon, [{"entropy": math.nan, "gibberish/rate": 1.0}], start=7)
    assert later == [first]


def test_resume_mid_trajectory_detects_exactly_as_uninterrupted():
    rows = healthy(10) + [{"entropy": 5.0, "reward/mean": 0.0, "gibberish/rate": 0.9}] * 10
    ref = StabilityMonitor(**ALL_ON)
    ref_out = feed(ref, rows)
    for cut in (4, 11, 12, 15):  # before, at the start of, inside and after the failing streaks
        a = StabilityMonitor(**ALL_ON)
        out = feed(a, rows[:cut])
        b = StabilityMonitor(**ALL_ON)
        b.load_state_dict(a.state_dict())
        assert b.update(cut, rows[cut - 1]) == out[-1]  # a replayed step changes nothing
        assert out + feed(b, rows[cut:], start=cut + 1) == ref_out
    with pytest.raises(ValueError, match="missing keys"):
        StabilityMonitor().load_state_dict({})


def test_from_config_and_bad_thresholds():
    mon = StabilityMonitor.from_config(StabilityConfig())
    assert mon.collapse_frac == 0.01 and mon.entropy_floor == 1e-6 and mon.gibberish_max == 0.5
    with pytest.raises(ValueError, match="entropy_collapse_frac"):
        StabilityMonitor(entropy_collapse_frac=1.5)
    with pytest.raises(ValueError, match="gibberish_max"):
        StabilityMonitor(gibberish_max=1.0)


def test_gibberish_on_short_answers():
    """Degenerate short answers: one character over and over is caught at any length; a short valid
    answer and a chain-of-thought trace are not."""
    assert gibberish_reason("7777777") == "run"
    assert gibberish_reason("======") == "run"
    assert gibberish_reason("57") is None
    assert gibberish_reason("123+456=579,579-234=345,345+678=1023") is None
    assert gibberish_reason("12", format_ok=False) == "format"
    assert gibberish_rate(["7777777", "57", "x=", "1"], [True, True, False, True]) == pytest.approx(0.5)
