"""The planned contrasts' statistics (fp8rl.report.planned) against hand-computed cases."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pandas as pd
import pytest

from fp8rl.config import ContrastConfig, StudyConfig
from fp8rl.report.planned import contrast_row, contrasts_table
from fp8rl.stats.multiplicity import holm
from fp8rl.stats.power import welch_power
from fp8rl.stats.welch import welch

ROOT = Path(__file__).resolve().parents[3]

STUDY = StudyConfig(
    arms={"a": "grpo/m/fp8/tensorwise/s4", "b": "grpo/m/bf16/none/none"},
    min_effect=0.3,
    planning_sd=0.1,
    min_seeds=3,
    planned=[ContrastConfig(name="a_vs_b", arm="a", reference="b")],
)


def test_welch_contrast_by_hand():
    """a = (0.5, 0.6, 0.7), b = (0.2, 0.3, 0.4): difference 0.3; each variance 0.01, so
    se = sqrt(0.01/3 + 0.01/3) = 0.0816497 and t = 3.674235; Welch df = (2 * 0.01/3)^2 /
    (2 * (0.01/3)^2 / 2) = 4; t_{0.975, 4} = 2.776445, half-width 0.226696; two-sided p = 0.02131."""
    row = contrast_row(STUDY.planned[0], [0.5, 0.6, 0.7], [0.2, 0.3, 0.4], STUDY, 0.05)
    assert row["difference"] == pytest.approx(0.3)
    assert row["df"] == pytest.approx(4.0)
    assert row["low"] == pytest.approx(0.3 - 0.226696, abs=2e-6)
    assert row["high"] == pytest.approx(0.3 + 0.226696, abs=2e-6)
    w = welch([0.5, 0.6, 0.7], [0.2, 0.3, 0.4])
    t, p = w.t, w.p
    assert t == pytest.approx(3.674235, abs=1e-6)
    assert p == pytest.approx(0.02131, abs=5e-5)
    assert row["p"] == pytest.approx(p)
    # the planned SD equals the observed one here, and so do the seed counts: the two powers agree
    assert row["power_planned"] == pytest.approx(row["power_observed"])


def test_welch_power_limits():
    # no effect: the rejection rate is the level (Welch's test is a little conservative at 5 per
    # group, 0.045 in this simulation, whose error is ~0.0015 at 20000 draws)
    assert welch_power(0.0, 1.0, 5, 1.0, 5, 0.05) == pytest.approx(0.05, abs=0.008)
    # large samples: the normal approximation, Phi(0.1 / sqrt(2/1000) - 1.96) = Phi(0.2761) = 0.6088
    assert welch_power(0.1, 1.0, 1000, 1.0, 1000, 0.05, draws=4000) == pytest.approx(0.6088, abs=0.025)
    # n = 3 per group, effect 3 SDs: the test rejects ~68 % of the time (the noncentral t with the
    # expected df 4 would say 0.78)
    assert welch_power(0.3, 0.1, 3, 0.1, 3, 0.05) == pytest.approx(0.68, abs=0.02)
    # more seeds, more power; seeded: the same inputs give the same number
    assert welch_power(0.1, 0.06, 5, 0.06, 5, 0.05) < welch_power(0.1, 0.06, 8, 0.06, 8, 0.05)
    assert welch_power(0.1, 0.06, 5, 0.06, 5, 0.05) == welch_power(0.1, 0.06, 5, 0.06, 5, 0.05)
    assert math.isnan(welch_power(0.3, 0.1, 1, 0.1, 3, 0.05))
    with warnings.catch_warnings():  # one group without spread: no warning, a power all the same
        warnings.simplefilter("error")
        assert 0.0 < welch_power(0.3, 0.0, 3, 0.1, 3, 0.05) < 1.0


def test_holm_by_hand():
    # sorted 0.01, 0.04: 2 * 0.01 = 0.02, then max(0.02, 1 * 0.04) = 0.04
    assert holm([0.01, 0.04]) == pytest.approx([0.02, 0.04])
    # sorted 0.02, 0.03: 0.04, then max(0.04, 0.03) = 0.04 (step-down keeps the order)
    assert holm([0.03, 0.02]) == pytest.approx([0.04, 0.04])
    out = holm([0.01, math.nan, 0.5])  # NaN is no member of the family
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.5)


def test_planned_table_decides_and_exploratory_does_not():
    study = STUDY.model_copy(update={"exploratory": [ContrastConfig(name="b_vs_a", arm="b", reference="a")]})
    endpoints = pd.DataFrame(
        {
            "arm": ["a"] * 3 + ["b"] * 3,
            "endpoint": [0.5, 0.6, 0.7, 0.2, 0.3, 0.4],
        }
    )
    planned = contrasts_table(endpoints, study, planned=True)
    assert planned.loc[0, "p_adjusted"] == pytest.approx(planned.loc[0, "p"])  # a family of one
    assert planned.loc[0, "decision"] == "reject H0: no difference"
    exploratory = contrasts_table(endpoints, study, planned=False)
    assert exploratory.loc[0, "difference"] == pytest.approx(-0.3)
    assert exploratory.loc[0, "decision"] == "exploratory" and math.isnan(exploratory.loc[0, "p_adjusted"])


def test_fixed_sequence_by_hand():
    from fp8rl.stats.multiplicity import fixed_sequence

    # in the listed order: 0.01, then max(0.01, 0.04), then max(0.04, 0.02): a later smaller p cannot
    # pass an earlier larger one
    assert fixed_sequence([0.01, 0.04, 0.02]) == pytest.approx([0.01, 0.04, 0.04])
    out = fixed_sequence([0.01, math.nan, 0.001])  # an untested contrast ends the sequence
    assert out[0] == pytest.approx(0.01) and math.isnan(out[1]) and math.isnan(out[2])


def test_a_fixed_sequence_names_why_the_contrasts_after_an_untested_one_have_no_decision():
    """The first contrast's arm gave one value on every seed (no spread: no test), which ends a fixed
    sequence: the second keeps its own p but gets no decision, and says the sequence ended, not that it
    could not be tested."""
    from fp8rl.report.planned import SEQUENCE_ENDED

    arms = {
        "flat": "grpo/m/fp8/tensorwise/flat",
        "hi": "grpo/m/fp8/tensorwise/hi",
        "ref": "grpo/m/bf16/none/none",
    }
    planned = [ContrastConfig(name=f"{x}_vs_ref", arm=x, reference="flat") for x in ("ref", "hi")]
    study = StudyConfig(arms=arms, min_effect=0.3, planning_sd=0.1, min_seeds=3, planned=planned,
                        multiplicity="fixed_sequence")  # fmt: skip
    endpoints = pd.DataFrame(
        {"arm": ["flat"] * 4 + ["ref"] * 4 + ["hi"] * 4,
         "endpoint": [0.5] * 4 + [0.5] * 4 + [0.35, 0.41, 0.33, 0.43]}
    )  # fmt: skip
    table = contrasts_table(endpoints, study, planned=True)
    assert math.isnan(table.loc[0, "p"]) and table.loc[0, "decision"] == "no test (no spread among the units)"
    assert math.isfinite(table.loc[1, "p"]) and math.isnan(table.loc[1, "p_adjusted"])
    assert table.loc[1, "decision"] == SEQUENCE_ENDED


def test_a_fixed_sequence_family_tests_at_the_full_alpha_in_its_listed_order():
    """Three contrasts of which Holm rejects one at 0.05 while a fixed sequence from the strongest effect
    down rejects the first two and stops at the third."""
    arms = {x: f"grpo/m/fp8/tensorwise/{x}" for x in ("hi", "mid", "lo")} | {"ref": "grpo/m/bf16/none/none"}
    planned = [ContrastConfig(name=f"{x}_vs_ref", arm=x, reference="ref") for x in ("hi", "mid", "lo")]
    study = StudyConfig(arms=arms, min_effect=0.3, planning_sd=0.1, min_seeds=3, planned=planned,
                        multiplicity="fixed_sequence")  # fmt: skip
    endpoints = pd.DataFrame(
        {
            "arm": ["ref"] * 4 + ["hi"] * 4 + ["mid"] * 4 + ["lo"] * 4,
            "endpoint": [0.50, 0.52, 0.48, 0.50, 0.35, 0.41, 0.33, 0.43, 0.41, 0.45, 0.37, 0.47,
                         0.47, 0.53, 0.44, 0.52],
        }
    )  # fmt: skip
    table = contrasts_table(endpoints, study, planned=True)
    p = list(table["p"])
    assert list(table["p_adjusted"]) == pytest.approx([p[0], max(p[:2]), max(p)])
    assert list(table["decision"]) == ["reject H0: no difference"] * 2 + ["not rejected"]
    assert holm(p)[1] > 0.05  # Holm would not reject the second
    # the planned power is at the full alpha (the first contrast's level), not alpha / 3 as with Holm
    holm_study = study.model_copy(update={"multiplicity": "holm"})
    assert (
        table.loc[0, "power_planned"]
        > contrasts_table(endpoints, holm_study, planned=True).loc[0, "power_planned"]
    )


@pytest.mark.parametrize(
    ("metric", "want"),
    [("reward/mean", 0.0), ("acc/mean", 0.0), ("entropy", math.nan), ("gibberish/rate", math.nan)],
)
def test_a_diverged_run_without_a_window_scores_0_only_on_a_reward_endpoint(metric, want):
    """A diverged run that stopped before the endpoint's window earned no reward there (0), but has no
    entropy or gibberish rate that stands for "stopped" (NaN: left out, never imputed); a run that
    reached the window keeps its mean, and a failed run has no endpoint."""
    from fp8rl.config_loader import load_config
    from fp8rl.report.endpoints import study_endpoint

    cfg = load_config(ROOT / "config" / "learn.yaml", [f"study.endpoint.metric={metric}"])
    stopped = pd.DataFrame({metric: [0.4, 0.5]}, index=[1, 2])  # 2 of the planned steps: before the window
    got = study_endpoint(cfg, "diverged", stopped, {})
    assert (math.isnan(got) and math.isnan(want)) or got == want
    late = cfg.schedule.steps
    reached = pd.DataFrame({metric: [0.4, 0.3]}, index=[late - 1, late])
    assert study_endpoint(cfg, "diverged", reached, {}) == pytest.approx(0.35)
    assert math.isnan(study_endpoint(cfg, "failed", reached, {}))
