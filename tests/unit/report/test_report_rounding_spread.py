"""Seeds that agree up to float rounding have no spread: no test, no interval that excludes 0, and no
'learned' for the control. Three rises of 0.1 computed from different numbers have an SD of ~1e-17,
on which a t-test reported p ~ 1e-31."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from fp8rl.config import ContrastConfig, StudyConfig
from fp8rl.report.control import verdict
from fp8rl.report.paired import paired_contrast_row
from fp8rl.report.planned import contrast_row
from fp8rl.stats.intervals import one_sample_p, sample_sd, t_interval
from fp8rl.stats.welch import welch

# each 0.1 or 0.5 up to float rounding, not all the same float
TENTHS = [0.1, 0.3 - 0.2, 0.7 - 0.6]
HALVES = [0.5, 0.8 - 0.3, 0.9 - 0.4, 1.1 - 0.6]

STUDY = StudyConfig(
    arms={"a": "grpo/m/fp8/tensorwise/s4", "b": "grpo/m/bf16/none/none"},
    unit="base",
    min_effect=0.3,
    planning_sd=0.1,
    min_seeds=3,
    planned=[ContrastConfig(name="a_vs_b", arm="a", reference="b")],
)


@pytest.mark.parametrize("values", [TENTHS, HALVES], ids=["tenths", "halves"])
def test_rounding_is_no_spread(values):
    assert len(set(values)) > 1 and 0 < np.std(values, ddof=1) < 1e-15  # the case: rounding only
    assert sample_sd(values) == 0.0
    ci = t_interval(values)
    assert ci.low == ci.high == ci.estimate
    assert math.isnan(one_sample_p(values))
    assert verdict(ci.low, ci.high) == "no interval"


def test_a_real_spread_stays_a_spread():
    assert sample_sd([0.1, 0.1 + 1e-6, 0.1]) > 0
    assert sample_sd([1e-12, 2e-12, 3e-12]) == pytest.approx(1e-12)  # tiny values, relative spread
    assert verdict(*(lambda c: (c.low, c.high))(t_interval([0.1, 0.12, 0.11]))) == "learned"


def test_welch_of_two_rounded_groups_is_no_test():
    w = welch([x + 0.4 for x in TENTHS], HALVES)
    assert w.delta.low == w.delta.high and math.isnan(w.p) and math.isnan(w.t)
    row = contrast_row(STUDY.planned[0], [x + 0.4 for x in TENTHS], HALVES, STUDY, 0.05)
    assert math.isnan(row["p"]) and math.isnan(row["power_observed"])


def test_a_paired_contrast_of_equal_differences_is_no_test():
    """Three bases whose arm is 0.1 above its reference, each difference rounded differently."""
    arm = [0.4, 0.7, 0.8]
    ref = [0.3, 0.6, 0.7]  # 0.4-0.3, 0.7-0.6, 0.8-0.7: 0.1 up to rounding
    endpoints = pd.DataFrame(
        {
            "arm": ["a"] * 3 + ["b"] * 3,
            "base": ["b0", "b1", "b2"] * 2,
            "endpoint": arm + ref,
        }
    )
    row = paired_contrast_row(STUDY.planned[0], endpoints, STUDY, 0.05)
    assert row["difference"] == pytest.approx(0.1)
    assert math.isnan(row["p"]), row["p"]
    assert row["low"] == row["high"] == row["difference"]
    assert math.isnan(row["power_observed"])


def test_a_planned_contrast_says_why_it_has_no_test():
    """Bases that all gave one difference are no spread, not too few units; one base is too few."""
    from fp8rl.report.planned import contrasts_table

    endpoints = pd.DataFrame(
        {
            "arm": ["a"] * 3 + ["b"] * 3,
            "base": ["b0", "b1", "b2"] * 2,
            "endpoint": [0.4, 0.7, 0.8, 0.3, 0.6, 0.7],
        }
    )
    three = contrasts_table(endpoints, STUDY, planned=True).iloc[0]
    assert three["bases"] == 3 and three["decision"] == "no test (no spread among the units)"
    one = contrasts_table(endpoints[endpoints["base"] == "b0"], STUDY, planned=True).iloc[0]
    assert one["bases"] == 1 and one["decision"] == "no test (n < 2)"
    spread = endpoints.assign(endpoint=[0.4, 0.9, 0.8, 0.3, 0.6, 0.7])
    assert contrasts_table(spread, STUDY, planned=True).iloc[0]["decision"] in (
        "not rejected",
        "reject H0: no difference",
    )
