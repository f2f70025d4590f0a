"""What README.md and docs/ (clipping, learn, attribution) say in words about the published clipping
study holds for its tables. The figures themselves are generated blocks (`clipping-findings`, checked by `fp8rl quotes
--check`); the sentences around them are not, so each claim is checked here against
results/published/clipping/: a re-publication that changes an answer fails this test until the words
are rewritten."""

from __future__ import annotations

import pandas as pd
import pytest
from report_fixtures import REPO, fold, published_csv
from scipy import stats

from fp8rl.config_loader import load_config

README, PAGE = fold("README.md"), fold("docs/clipping.md")
LEARN, ATTRIBUTION = fold("docs/learn.md"), fold("docs/attribution.md")


def table(name: str) -> pd.DataFrame:
    return published_csv("clipping", name)


@pytest.fixture(scope="module")
def min_effect() -> float:
    return load_config(str(REPO / "config" / "clipping.yaml"), []).study.min_effect


def test_the_control_learned_on_the_base_means():
    (control,) = table("control").to_dict("records")
    assert control["unit"] == "base" and control["n"] == 6 and control["verdict"] == "learned"
    assert "Its control learned" in README and "**The control learned**" in PAGE
    bf16 = table("endpoints").query("variant == 'bf16'")
    assert len(bf16) == 18 and (bf16["reward_rise"] > 0).all()  # "rose on every base, and in every run"
    assert "bf16's reward rose on every base, and in every run" in PAGE


def test_both_planned_contrasts_are_not_rejected_and_exclude_the_minimum_effect(min_effect):
    planned = table("planned")
    assert sorted(planned["contrast"]) == ["tis_calib_fixed_vs_tis", "tis_calib_vs_tis"]
    for r in planned.to_dict("records"):
        assert r["decision"] == "not rejected", r["contrast"]
        assert -min_effect < r["low"] and r["high"] < min_effect, r["contrast"]  # "far narrower"
        assert r["high"] - r["low"] < min_effect / 2, r["contrast"]
    assert "an effect of that size is excluded here, not merely undetected" in README
    assert "an effect of that size is excluded" in PAGE
    assert "whether calibrated clipping wins it back: it did not" in LEARN
    assert "calibrated clipping neither raised nor lowered the final reward against TIS" in ATTRIBUTION


def test_calibration_removed_most_of_the_excess_clipping_and_none_of_the_gap():
    arms = table("arms").set_index("arm")
    for calibrated in ("tis_calib", "tis_calib_fixed"):
        assert arms.loc[calibrated, "excess_clip"] < arms.loc["tis", "excess_clip"] / 2  # "most of"
        assert arms.loc["bf16", "clip_low_neg"] < arms.loc[calibrated, "clip_low_neg"]  # "toward bf16's"
        assert arms.loc[calibrated, "clip_low_neg"] < arms.loc["tis", "clip_low_neg"]
    explo = table("exploratory").set_index("contrast")
    for gap in ("tis_vs_bf16", "tis_calib_vs_bf16"):  # "stays as far below bf16"
        assert explo.loc[gap, "high"] < 0, gap
    assert explo.loc["proportional_vs_fixed", "low"] < 0 < explo.loc["proportional_vs_fixed", "high"]
    assert "removed most of FP8's excess clipping" in README and "**The gap stays.**" in PAGE


def test_no_arm_had_an_entropy_surge_and_only_plain_fp8_diverged():
    surv = table("study_survival").set_index("arm")
    assert (surv["peak_rel_entropy_max"] < 2).all()  # a surge is several times the baseline
    assert surv["diverged"].sum() == surv.loc["fp8", "diverged"] == 1
    assert surv.loc["fp8", "kinds"] == "reward_collapse: 1"
    assert "No run showed an entropy surge" in README and "**No entropy surge, no garbled output.**" in PAGE
    gibberish = table("endpoints")["gibberish_rate"].max()
    assert gibberish < 0.05, gibberish  # "no garbled output"


def test_the_clipping_line_quotes_the_arms_and_the_mechanism_tables():
    """The findings' clipping line: each arm's clip fraction and excess from arms.csv, and the calibrated
    bounds, computed from endpoints.csv, equal to the mechanism table's seed means of the same runs."""
    from fp8rl.quotes.studies import clipping_per_arm
    from fp8rl.report.formats import num, pp_point

    line = clipping_per_arm(REPO / "results" / "published", "clipping")
    for r in table("arms").to_dict("records"):
        assert f"{r['arm']} {num(100 * r['clip_low_neg'])} %" in line
        if r["arm"] != "bf16":
            assert f"{r['arm']} {pp_point(r['excess_clip'])}" in line
    mech = table("mechanism").set_index(["variant", "condition"])
    for arm, condition in (("tis_calib", "s4"), ("tis_calib_fixed", "s4_fixed")):
        low, high = mech.loc[("fp8_tis_calib", condition), ["calib_low", "calib_high"]]
        assert f"{arm} [{num(low)}, {num(high)}]" in line
    assert "fixed" in line and mech.loc[("fp8_tis_calib", "s4_fixed"), "calib_high"] == pytest.approx(1.2)


def test_about_half_of_the_gap_is_there_in_the_first_steps():
    """docs/clipping.md: the gap to bf16 over the first ten steps (`reward_first`, paired within base) is
    below 0 with its interval and about half of the final-window gap, in every FP8 + TIS arm."""
    ep = table("endpoints")
    ep = ep[ep["arm"].notna()].assign(arm=lambda f: f["arm"].str.split(";")).explode("arm")
    first = ep.groupby(["base", "arm"])["reward_first"].mean().unstack("arm")
    final = ep.groupby(["base", "arm"])["endpoint"].mean().unstack("arm")
    for arm in ("tis", "tis_calib", "tis_calib_fixed"):
        d = first[arm] - first["bf16"]
        ci = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
        assert ci.high < 0, arm
        assert 0.35 < d.mean() / (final[arm] - final["bf16"]).mean() < 0.65, arm  # "about half"
    assert "About half of the final gap is already there over the first ten steps" in PAGE
    cfg = load_config(str(REPO / "config" / "clipping.yaml"), [])
    from fp8rl.report.endpoints import FIRST_FRAC

    assert FIRST_FRAC * cfg.schedule.steps == 10  # "the first ten steps"
    assert cfg.eval.lm_eval_tasks == [] and cfg.eval.agent == []  # "no bf16-sampled evaluation"


def test_the_disclosures_hold_for_the_published_tables():
    """docs/clipping.md's disclosures and config/clipping.yaml's comment: base 4 ran to the SFT cap
    below the stop rule's target (the others stopped earlier), the config keeps it explicitly, and the
    nine runs on bases 0-2 are the cells the learning tier also trained."""
    cfg = load_config(str(REPO / "config" / "clipping.yaml"), [])
    bases = table("base_models").set_index("seed")
    cap, target = cfg.sft.steps, cfg.sft.stop_at_accuracy
    assert bases.loc[4, "steps"] == cap and bases.loc[4, "acc/test_sampled"] < target
    assert (bases.drop(index=4)["steps"] < cap).all()
    others = bases.drop(index=4)["acc/test_sampled"]
    config_text = (REPO / "config" / "clipping.yaml").read_text()
    assert f"{bases.loc[4, 'acc/test_sampled']:.3f}" in config_text
    assert f"{others.min():.2f}-{others.max():.2f}" in config_text
    assert cfg.sft.on_unmet_stop == "keep"
    assert f"{cap}-step cap" in PAGE and "reaching the target (`sft.stop_at_accuracy`)" in PAGE
    learn = load_config(str(REPO / "config" / "learn.yaml"), [])

    def cell(run_id: str) -> str:  # the cell without its seed; the plain-FP8 context arm's condition
        return run_id.rsplit("/", 1)[0].replace("/s4_plain", "/s4")

    learn_cells = {s.run_id.rsplit("/", 1)[0] for s in learn.runs()}
    ends = table("endpoints")
    on_learn_bases = ends[ends["base"].isin([f"tiny/seed{b}" for b in range(3)]) & (ends["seed"] < 3)]
    repeated = on_learn_bases[on_learn_bases["run_id"].map(cell).isin(learn_cells)]
    assert len(repeated) == 9 and repeated["run_id"].map(cell).nunique() == 3
    assert "3 × 3 runs of the 78" in PAGE
