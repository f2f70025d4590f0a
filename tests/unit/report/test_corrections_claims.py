"""What README.md and docs/longform.md say in words about the published corrections' comparison holds
for its tables. The figures are generated blocks (`corrections-findings`, `corrections-leaderboard`,
checked by `fp8rl quotes --check`); the sentences around them are not, so each claim and each figure
they carry is checked here against results/published/corrections/: a re-publication that changes an
answer fails this test until the words are rewritten."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from report_fixtures import REPO, fold, published_csv

from fp8rl.config_loader import load_config

CONFIG = REPO / "config" / "corrections.yaml"
CORRECTIONS = ("tis_calib", "tis_calib_every20", "scorecenter", "tis_scorecenter", "qurl", "icepop",
               "icepop_adaptive")  # fmt: skip


README, PAGE = fold("README.md"), fold("docs/longform.md")


def table(name: str) -> pd.DataFrame:
    return published_csv("corrections", name)


@pytest.fixture(scope="module")
def planned() -> pd.DataFrame:
    return table("planned").set_index("arm")


@pytest.fixture(scope="module")
def exploratory() -> pd.DataFrame:
    return table("exploratory").set_index("contrast")


@pytest.fixture(scope="module")
def survival() -> pd.DataFrame:
    return table("study_survival").set_index("arm")


@pytest.fixture(scope="module")
def cost() -> pd.Series:
    """Each arm's mean seconds per step, by the arm's cell (arms.csv) in throughput.csv."""
    arms = table("arms").set_index("arm")
    tp = table("throughput").fillna({"condition": "none"})
    tp.index = [
        "/".join(map(str, k)) for k in tp[["algo", "model", "variant", "granularity", "condition"]].values
    ]
    return pd.Series({arm: tp.loc[cell, "step_time_s"] for arm, cell in arms["cell"].items()})


def test_the_control_learned_and_tis_fell_short_of_bf16(exploratory):
    control = table("control")
    assert (control["verdict"] == "learned").all() and len(control) == 1
    assert int(control.iloc[0]["n"]) == len(load_config(str(CONFIG), []).matrix.seeds) == 8
    assert control.iloc[0]["low"] > 0
    assert exploratory.loc["tis_vs_bf16", "high"] < 0
    assert (
        "Its control learned, and TIS again fell short of bf16 on the held-out endpoint (exploratory)"
        in README
    )
    assert "The control learned**, so the comparison stands. FP8 + TIS fell short of bf16" in PAGE


def test_no_correction_improved_on_tis_and_three_lost_after_holm(planned):
    rows = planned.loc[list(CORRECTIONS)]
    assert (rows["reference"] == "tis").all() and (rows["difference"] < 0).all()
    min_effect = load_config(str(CONFIG), []).study.min_effect
    assert (rows["high"] < min_effect / 5).all()  # "far short of the registered minimum effect"
    assert "No correction improved on TIS" in README and "No correction improved on TIS." in PAGE
    assert "every interval's upper end lies far short of the registered minimum effect" in README
    rejected = rows.index[rows["decision"].str.startswith("reject")].tolist()
    assert sorted(rejected) == ["icepop", "icepop_adaptive", "scorecenter"]
    assert "Three were worse than TIS after Holm: Score Centering alone, IcePop and adaptive IcePop" in README
    assert "Three are rejected after Holm, as losses against TIS: Score Centering alone, IcePop and" in PAGE
    # "intervals below 0 but are not rejected after Holm"
    near = rows.loc[["tis_scorecenter", "qurl", "tis_calib_every20"]]
    assert (near["high"] < 0).all() and not near["decision"].str.startswith("reject").any()
    assert set(rows.index[rows["high"] < 0]) == set(rejected) | set(near.index)


def test_calibrated_clipping_did_not_close_the_gap_at_either_cadence(planned, exploratory):
    per_update, every20 = planned.loc["tis_calib"], planned.loc["tis_calib_every20"]
    assert not per_update["decision"].startswith("reject") and not every20["decision"].startswith("reject")
    assert per_update["low"] < 0 < per_update["high"]  # "its interval at every update straddles 0"
    gap = -exploratory.loc["tis_vs_bf16", "difference"]
    assert per_update["high"] < gap / 4  # "the upper end of its interval is a small fraction of that gap"
    assert "(the upper end of its interval is a small fraction of that gap)" in README
    cadence = exploratory.loc["every20_vs_per_update"]
    assert cadence["low"] < 0 < cadence["high"] and abs(cadence["difference"]) < 0.01
    assert (
        "with an upper end a small fraction of that gap, and no difference between the cadences was shown"
        in PAGE
    )


def test_tis_alone_had_no_run_flagged_and_every_correction_had_some(survival):
    assert survival.loc["tis", "diverged"] == 0 and survival.loc["bf16", "diverged"] == 0
    flagged = survival.loc[list(CORRECTIONS), "diverged"]
    assert flagged.min() == 1 and flagged.max() == 4
    assert "every correction had 1 to 4 of 8 runs flagged" in README
    assert "FP8 + TIS was the only FP8 arm with no run flagged (0 of 8)" in PAGE
    # "their intervals overlap TIS's": each correction's lower end is under TIS's upper end
    assert (survival.loc[list(CORRECTIONS), "diverged_low"] < survival.loc["tis", "diverged_high"]).all()
    kinds = set()
    for k in survival.loc[list(CORRECTIONS), "kinds"].dropna():
        kinds |= {m.group(1) for m in re.finditer(r"(\w+): \d+", k)}
    assert kinds == {"gibberish", "reward_collapse"}  # "for garbled text or a reward collapse"
    said = {"icepop": 1, "tis_calib": 2, "tis_calib_every20": 3, "qurl": 2, "icepop_adaptive": 3,
            "scorecenter": 4, "tis_scorecenter": 4}  # fmt: skip
    assert flagged.to_dict() == said
    assert (
        "IcePop 1, calibrated clipping 2 (every update) and 3 (every 20 steps), QuRL 2, adaptive IcePop 3, "
        "Score Centering 4 alone and 4 with TIS" in PAGE
    )
    medians = survival.loc[["scorecenter", "tis_scorecenter"], "median_div_step"].astype(int).tolist()
    assert f"(Kaplan-Meier median steps {medians[0]} and {medians[1]})" in PAGE


def test_no_entropy_surge(survival):
    medians, highest = survival["peak_rel_entropy_median"], survival["peak_rel_entropy_max"]
    assert ((medians - 1).abs() < 0.1).all()  # "each arm's median peak is within a tenth of its baseline"
    assert highest.max() < 1.5  # "no run reached one and a half times it"
    assert (
        "median peak is within a tenth of its baseline, and no run reached one and a half times it" in PAGE
        and "No run's entropy surged" in README
    )


def test_the_step_times_say_what_the_words_about_cost_say(cost):
    ratio = cost / cost["tis"]
    assert ratio["tis_calib"] < 1 < ratio["tis_calib_every20"]
    assert "calibration at every update ran faster than TIS, every 20 steps slower" in PAGE
    assert "(calibration at every update ran faster than TIS)" in README
    assert 1.4 <= ratio["scorecenter"] <= 1.6 and 1.4 <= ratio["tis_scorecenter"] <= 1.6  # "about half again"
    assert ratio.drop(["bf16", "scorecenter", "tis_scorecenter"]).max() < 1.2  # "stands out of that spread"
    share = table("throughput").set_index(["variant", "condition"])["calib_overhead_pct"]
    tis, per_update = share[("fp8_tis", "kl1e-2")], share[("fp8_tis_calib", "kl1e-2")]
    assert abs(per_update - tis) < 0.1 * tis  # "about the same"
    assert share[("fp8_tis_calib", "kl1e-2_every20")] < min(tis, per_update)  # "every 20 steps it is lower"
    assert "calibration's at every update are about the same, and every 20 steps it is lower" in PAGE


def test_the_tier_row_gives_the_run_hours_the_throughput_table_adds_up_to():
    tp = table("throughput")
    steps = load_config(str(CONFIG), []).schedule.steps
    hours = (tp["runs_measured"] * tp["step_time_s"]).sum() * steps / 3600
    assert (
        f"about {round(hours)} run-hours of training steps (two runs at a time on 2 cores: about {round(hours / 2)} hours)"
        in README
    )


def test_the_runs_sat_at_the_registered_mismatch():
    mm = table("mismatch")
    fp8 = mm[mm["variant"] != "bf16"]
    assert (fp8["target_kl"] == 0.01).all() and len(fp8) == 8
    times = fp8["kl_x_real_bf16"]
    assert round(times.min()) == 5 and round(times.max()) == 8
    assert "KL per token averaged between 5 and 8 times a healthy real BF16 stack's" in PAGE
