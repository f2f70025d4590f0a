"""The learning tier's quoted findings (block `learn-findings`, fp8rl.quotes.studies): the control's verdict
with its interval, each planned contrast marked void when the control did not learn, and the divergences."""

from __future__ import annotations

import pandas as pd
import pytest

from fp8rl.quotes.files import BLOCKS
from fp8rl.quotes.registry import QuoteError

learn_findings = BLOCKS["learn-findings"]  # study_findings bound to the learning tier

PLANNED = {
    "contrast": "fp8_s4_vs_bf16", "arm": "fp8_s4", "reference": "bf16", "n_arm": 3, "n_reference": 3,
    "difference": -0.41, "low": -0.52, "high": -0.30, "df": 3.9, "p": 0.0004, "p_adjusted": 0.0012,
    "decision": "reject H0: no difference", "power_observed": 1.0, "power_planned": 0.9, "question": "q",
}  # fmt: skip


def _publish(root, rise=(0.30, 0.22, 0.38), diverged=0):
    tables = root / "learn" / "tables"
    tables.mkdir(parents=True)
    low, high = rise[1], rise[2]
    verdict = "learned" if low > 0 else ("fell" if high < 0 else "flat")
    pd.DataFrame([{"algo": "grpo", "model": "tiny", "condition": "none", "runs": 3, "used": 3, "diverged": 0,
                   "unit": "base", "n": 3, "reward_first": 0.5, "reward_last": 0.5 + rise[0], "rise": rise[0],
                   "low": low, "high": high, "verdict": verdict}]).to_csv(tables / "control.csv", index=False)  # fmt: skip
    pd.DataFrame([PLANNED]).to_csv(tables / "planned.csv", index=False)
    stab = [{"algo": "grpo", "model": "tiny", "variant": "fp8", "granularity": "tensorwise", "noise": 4.0,
             "runs": 3, "diverged": diverged, "kinds": "reward_collapse" if diverged else ""}]  # fmt: skip
    pd.DataFrame(stab).to_csv(tables / "stability.csv", index=False)
    ends = [{"run_id": f"r{i}", "arm": arm, "peak_entropy_rel": peak}
            for i, (arm, peak) in enumerate([("bf16", 0.9), ("bf16", 0.96), ("fp8_s4", 0.97), ("fp8_s4", 1.01),
                                             ("fp8_s4", 0.99), (None, 5.0)])]  # fmt: skip
    pd.DataFrame(ends).to_csv(tables / "endpoints.csv", index=False)
    return root


def test_exploratory_contrasts_and_the_entropy_peak_are_quoted_as_such(tmp_path):
    root = _publish(tmp_path)
    tables = root / "learn" / "tables"
    explo = {**PLANNED, "contrast": "tis_vs_bf16", "arm": "fp8_tis_s4", "p_adjusted": None,
             "decision": "exploratory", "difference": -0.148, "low": -0.231, "high": -0.064, "p": 0.0089}  # fmt: skip
    pd.DataFrame([explo]).to_csv(tables / "exploratory.csv", index=False)
    text = learn_findings(root)
    assert (
        "- Exploratory, not a planned test: fp8_tis_s4 − bf16: −0.148 [−0.231, −0.064] (Welch p = 0.009"
        in text
    )
    # the peak after the baseline steps (endpoints.csv), per arm's median run and the highest run of an
    # arm; a run of no arm (5.0) is not a study run
    assert "each arm's median run bf16 0.93, fp8_s4 0.99; the highest run 1.01 (fp8_s4)." in text


def test_a_learning_control_and_its_contrasts(tmp_path):
    text = learn_findings(_publish(tmp_path))
    assert (
        "- bf16 control, grpo/tiny: sampled reward 0.50 → 0.80, rise 0.300 [0.220, 0.380] over 3 units (base): **learned**."
        in text
    )
    assert "fp8_s4 − bf16" in text and "−0.410 [−0.520, −0.300]" in text and "void" not in text
    assert "Divergences: none in 3 runs." in text


def test_a_flat_control_voids_every_contrast(tmp_path):
    text = learn_findings(_publish(tmp_path, rise=(0.02, -0.05, 0.09), diverged=2))
    assert "**flat**" in text
    assert "(void: the control did not learn)" in text
    assert "- The comparison is void: the bf16 control did not learn." in text
    assert "fp8 at dose 4: 2/3 (reward_collapse)" in text


def test_an_unpublished_tier_is_named(tmp_path):
    with pytest.raises(QuoteError, match="control.csv: not published"):
        learn_findings(tmp_path)


def test_the_longform_findings_name_the_endpoint_multiplicity_and_axis_its_config_registers():
    """The block's words for the study are bound by hand (a published table does not carry them): they
    must say what config/longform.yaml registers."""
    from pathlib import Path

    from fp8rl.config_loader import load_config
    from fp8rl.quotes.studies import study_findings
    from fp8rl.report.paths import noise_axis

    cfg = load_config(Path(__file__).resolve().parents[3] / "config" / "longform.yaml")
    bound = BLOCKS["longform-findings"]
    assert bound.__wrapped__ is study_findings
    words = {"heldout/sampled_reward": "held-out sampled reward, bf16 sampler"}
    multiplicity = {"fixed_sequence": "fixed sequence", "holm": "Holm"}
    kwargs = bound.bound
    assert kwargs["endpoint"] == words[cfg.study.endpoint.metric]
    assert kwargs["adjusted"] == multiplicity[cfg.study.multiplicity]
    assert kwargs["axis"] == noise_axis(cfg)
