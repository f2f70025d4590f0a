"""The attribution tier's config: the `study` pre-registration and the new FP8 knobs, validated, and
left out of the dump (so of every digest) while unset."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from fp8rl.config import ExperimentConfig, FP8Config
from fp8rl.config_loader import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_new_keys_are_left_out_of_the_dump_while_unset():
    assert "rollout_noise_scale" not in FP8Config().model_dump()
    assert "ratio_noise" not in FP8Config().model_dump()
    f = FP8Config(noise_scale=4.0, rollout_noise_scale=1.0, ratio_noise=0.2)
    assert f.model_dump()["rollout_noise_scale"] == 1.0 and f.model_dump()["ratio_noise"] == 0.2
    assert f.rollout_dose == 1.0 and FP8Config(noise_scale=4.0).rollout_dose == 4.0
    for tier in ("smoke", "mechanism", "stress"):
        assert "study" not in load_config(ROOT / "config" / f"{tier}.yaml").model_dump()


def test_attribution_config_preregisters_its_study():
    cfg = load_config(ROOT / "config" / "attribution.yaml")
    s = cfg.study
    assert s.test == "welch_t" and s.sides == "two-sided" and 0 < s.alpha < 1
    assert {(c.arm, c.reference) for c in s.planned} == {("fp8_tis", "fp8"), ("fp8_tis_calib", "fp8_tis")}
    run_ids = [r.run_id for r in cfg.runs()]
    for arm in s.planned_arms():
        assert sum(r.rsplit("/", 1)[0] == s.arms[arm] for r in run_ids) >= s.min_seeds >= 5
    # every run belongs to exactly one arm
    assert sorted(r.rsplit("/", 1)[0] for r in run_ids) == sorted(
        p for p in s.arms.values() for r in run_ids if r.rsplit("/", 1)[0] == p
    )


def _raw() -> dict:
    return yaml.safe_load((ROOT / "config" / "attribution.yaml").read_text())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s["arms"].update(ghost="grpo/chain/fp8/tensorwise/s9"), "no cell of the matrix"),
        (lambda s: s["planned"].append({"name": "x", "arm": "fp8", "reference": "nope"}), "unknown arm"),
        (lambda s: s["planned"].append({"name": "x", "arm": "fp8", "reference": "fp8"}), "against itself"),
        (lambda s: s.update(min_seeds=9), "planned arm with 8 seeds"),
        (lambda s: s.update(test="mann_whitney"), "welch_t"),
        (lambda s: s.pop("min_effect"), "min_effect"),
    ],
)
def test_bad_study_sections_fail(edit, message):
    raw = _raw()
    edit(raw["study"])
    with pytest.raises(ValidationError, match=message):
        ExperimentConfig.model_validate(raw)
