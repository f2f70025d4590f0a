"""What README.md and docs/longform.md say in words about the published failure search holds for its
tables. The figures are generated blocks (`longform-failure-search`, `longform-findings`, checked by
`fp8rl quotes --check`); the sentences around them are not, so each claim is checked here against
results/published/longform/: a re-publication that changes an answer fails this test until the words
are rewritten."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from report_fixtures import REPO, fold, published_csv

from fp8rl.config_loader import load_config

KLS = ("kl1e-3", "kl3e-3", "kl1e-2", "kl3e-2", "kl1e-1")


README, PAGE = fold("README.md"), fold("docs/longform.md")


def table(name: str) -> pd.DataFrame:
    return published_csv("longform", name)


@pytest.fixture(scope="module")
def search() -> pd.DataFrame:
    return table("failure_search").set_index("condition")


@pytest.fixture(scope="module")
def survival() -> pd.DataFrame:
    return table("study_survival").set_index("arm")


def test_tis_first_fails_at_1e_2_by_the_held_out_branch_then_diverges_above(search):
    assert (
        "FP8 + TIS first fails at KL 1e-2, by a held-out loss against bf16 (no run diverged there)" in README
    )
    assert "**FP8 + TIS first fails at target KL 1e-2**, and there by the held-out branch" in PAGE
    failing = search.index[search["fails"]].tolist()
    assert failing[0] == "kl1e-2" and failing == ["kl1e-2", "kl3e-2", "kl1e-1"]
    at = search.loc["kl1e-2"]
    assert at["diverged"] == 0 and at["heldout_high"] < 0
    # "half its runs diverged at 3e-2 and all at 1e-1"
    assert search.loc["kl3e-2", "diverged"] * 2 == search.loc["kl3e-2", "trained"]
    assert search.loc["kl1e-1", "diverged"] == search.loc["kl1e-1", "trained"]
    assert "half its runs diverged at 3e-2 and all at 1e-1" in README
    # and the corrections' comparison moved there
    corrections = load_config(str(REPO / "config" / "corrections.yaml"), [])
    assert {cfg_c.fp8["target_kl"] for cfg_c in corrections.matrix.conditions} == {
        search.loc["kl1e-2", "target_kl"]
    }


def test_at_real_stack_settings_no_loss_is_shown_and_only_1e_3_excludes_the_minimum_effect(search):
    min_effect = load_config(str(REPO / "config" / "longform.yaml"), []).study.min_effect
    for kl in ("kl1e-3", "kl3e-3"):
        assert search.loc[kl, "diverged"] == 0 and not search.loc[kl, "fails"]
        assert search.loc[kl, "heldout_low"] < 0 < search.loc[kl, "heldout_high"]
    assert search.loc["kl1e-3", "heldout_low"] > -min_effect  # "a loss that large is excluded there"
    assert search.loc["kl3e-3", "heldout_low"] < -min_effect  # "at 3e-3 the interval still holds it"
    assert "At 1e-3 the held-out interval lies above the loss the study registered" in PAGE


def test_plain_fp8_garbles_first_and_surges_at_the_top(survival):
    plain = survival.loc[[f"fp8_{kl}" for kl in KLS]]
    gibberish = (
        plain["kinds"]
        .fillna("")
        .map(lambda k: int(m.group(1)) if (m := re.search(r"gibberish: (\d+)", k)) else 0)
    )
    assert gibberish.sum() * 2 > plain["diverged"].sum()  # "in most flagged plain FP8 runs"
    assert gibberish["fp8_kl3e-3"] >= 1 and gibberish["fp8_kl1e-3"] == 0  # "from one run at 3e-3 up"
    assert (
        "Plain FP8 wrote garbled text from one run at 3e-3 up, and at 1e-1 with a surging entropy" in README
    )
    # the surge: plain FP8 at 1e-1's median run is the one well above its baseline
    medians = survival["peak_rel_entropy_median"]
    assert medians.idxmax() == "fp8_kl1e-1" and medians.drop("fp8_kl1e-1").max() < 1.5 <= medians.max()


def test_tis_had_fewer_or_later_divergences_wherever_plain_fp8_diverged(survival):
    for kl in KLS:
        fp8, tis = survival.loc[f"fp8_{kl}"], survival.loc[f"tis_{kl}"]
        if fp8["diverged"] == 0:
            continue
        fewer = tis["diverged"] < fp8["diverged"]
        later = tis["diverged"] == fp8["diverged"] and tis["median_div_step"] > fp8["median_div_step"]
        assert fewer or later, kl


def test_the_kl_grew_under_plain_fp8_far_more_than_under_tis_at_the_higher_settings():
    mismatch = table("mismatch").set_index(["variant", "condition"])
    for kl in ("kl1e-2", "kl3e-2", "kl1e-1"):
        fp8 = mismatch.loc[("fp8", kl), "mismatch_kl_k3_growth"]
        tis = mismatch.loc[("fp8_tis", kl), "mismatch_kl_k3_growth"]
        assert fp8 > 2 * tis and tis < 2, kl
