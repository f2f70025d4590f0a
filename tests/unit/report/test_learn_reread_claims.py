"""What README.md, docs/learn.md and docs/mismatch.md say in words about the learning tier's re-read
(the mismatch in the field's units, the held-out bf16 endpoint) holds for its published tables: the
figures are generated blocks; the sentences around them are checked here, so a re-publication that
changes an answer fails until the words are rewritten."""

from __future__ import annotations

import pandas as pd
from report_fixtures import REPO, fold, published_csv

from fp8rl.vocabulary import REAL_BF16_KL

README, LEARN, MISMATCH = fold("README.md"), fold("docs/learn.md"), fold("docs/mismatch.md")


def table(name: str) -> pd.DataFrame:
    return published_csv("learn", name)


def by_tmpe_median(fp8: pd.DataFrame, dose: float) -> float:
    return float(fp8[(fp8["variant"] == "fp8") & (fp8["noise"] == dose)]["mismatch_tmpe_median"].iloc[0])


def test_every_dose_is_above_the_real_range_and_bf16_has_no_mismatch():
    mm = table("mismatch")
    fp8 = mm[mm["variant"] != "bf16"]
    assert (fp8["mismatch_kl_k3_median"] > REAL_BF16_KL).all()
    by_dose = fp8[fp8["variant"] == "fp8"].set_index("noise")["mismatch_kl_k3_median"]
    assert by_dose[4.0] > 10 * REAL_BF16_KL and by_dose[8.0] > 100 * REAL_BF16_KL  # "one to two orders"
    assert by_dose.is_monotonic_increasing
    bf16 = mm[mm["variant"] == "bf16"].iloc[0]
    assert bf16["mismatch_kl_k3"] < 1e-6 * REAL_BF16_KL * 1e3  # "essentially no mismatch"
    # heavy tails: at doses 2 and 4 a step's mean tmpe exceeds the median step's by orders of magnitude,
    # and at dose 8 the median step itself is far off
    heavy = fp8[fp8["noise"].isin([2.0, 4.0])]
    assert (heavy["mismatch_tmpe"] > 100 * heavy["mismatch_tmpe_median"]).all()
    assert by_tmpe_median(fp8, 8.0) > 100
    for text in (LEARN, MISMATCH, README):
        assert "above the real range" in text
    assert "At doses 2 and 4 the per-step means of tmpe are dominated by rare tokens" in LEARN
    assert "at dose 8 even the median step is" in LEARN


def test_the_held_out_endpoint_tells_the_same_story():
    sec = table("secondary")
    sampled = sec[sec["endpoint"] == "heldout/sampled_reward"].set_index("contrast")
    assert sampled.loc["bf16_gain_over_base", "low"] > 0  # the control learned there too
    primary = pd.concat([table("planned"), table("exploratory")]).set_index("contrast")
    for name, r in primary.iterrows():
        held = sampled.loc[name, "difference"]
        if abs(r["difference"]) >= 0.05:  # "keeps its sign and about its size"
            assert held * r["difference"] > 0 and 0.7 <= held / r["difference"] <= 1.15, name
    assert "keeps its sign and about its size" in LEARN
    assert "kept its sign and about its size" in README
    assert "the FP8 sampler's noise accounts for little of the gap" in LEARN


def test_the_mechanism_settings_sit_where_the_page_says():
    """docs/mismatch.md on the mechanism tier: at dose 1 every granularity with the FP8 KV cache is above
    a real BF16 stack's KL, e5m2 above hybrid; without the FP8 KV cache tensorwise is inside the range."""
    mm = pd.read_csv(REPO / "results" / "published" / "mechanism" / "tables" / "mismatch.csv")
    plain = mm[(mm["variant"] == "fp8") & (mm["noise"] == 1.0)].set_index("condition")
    with_kv = plain.loc[["hybrid_s1", "e5m2_s1"]]
    assert (with_kv["mismatch_kl_k3_median"] > REAL_BF16_KL).all() and len(with_kv) == 6  # 5 + e5m2
    hybrid = plain.loc["hybrid_s1"]
    e5m2 = float(plain.loc["e5m2_s1", "mismatch_kl_k3_median"])
    assert e5m2 > hybrid["mismatch_kl_k3_median"].max()
    assert plain.loc["hybrid_s1_nokv", "mismatch_kl_k3_median"] < REAL_BF16_KL
    assert "without the FP8 KV cache, tensorwise FP8 at dose 1 sits inside the real range" in MISMATCH
    assert (
        "every granularity with the FP8 KV cache is above a real BF16 stack's KL, and e5m2 more so"
        in MISMATCH
    )
