"""`study.unit: base`: a paired test over bases by default, min_seeds counted in bases both arms of a
planned contrast share, errors naming the key; studies without `unit` keep their dump."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fp8rl.config_loader import ConfigError, load_config
from fp8rl.stats.power import paired_power

ROOT = Path(__file__).resolve().parents[2]
ARMS = "{bf16: grpo/tiny/bf16/none, tis: grpo/tiny/fp8_tis/tensorwise}"
PLANNED = "[{name: tis_vs_bf16, arm: tis, reference: bf16}]"


def _cfg(*extra, unit="base"):
    study = f"study={{unit: {unit}, arms: {ARMS}, min_effect: 0.05, planning_sd: 0.03, min_seeds: 3, planned: {PLANNED}}}"
    return load_config(
        ROOT / "config/smoke.yaml",
        ["matrix.variants=[bf16,fp8_tis]", "matrix.seeds=[0,1,2,3,4,5]", study, *extra],
    )


def test_unit_base_counts_bases_and_defaults_to_the_paired_test():
    cfg = _cfg("sft.bases=3")
    assert cfg.study.unit == "base" and cfg.study.test == "paired_t"
    assert cfg.model_dump()["study"]["unit"] == "base"
    run = _cfg(unit="run")
    assert run.study.test == "welch_t" and "unit" not in run.model_dump()["study"]


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        # two bases for six seeds: fewer units than min_seeds
        (["sft.bases=2"], r"study.planned.tis_vs_bf16: its arms share 2 base model\(s\)"),
        # one shared base: the base-unit study has one unit
        (["sft.per_seed=false"], r"share 1 base model\(s\) \(tiny\)"),
        (["sft.bases=3", "study.test=welch_t"], "test: welch_t with unit: base"),
    ],
)
def test_inconsistent_unit_settings_are_refused(extra, match):
    with pytest.raises(ConfigError, match=match) as err:
        _cfg(*extra)
    assert "study" in str(err.value)


def test_paired_power_is_the_exact_noncentral_t():
    # no effect: the level itself; the case where scipy's nct.cdf gives NaN in the lower tail
    assert paired_power(0.0, 1.0, 5, 0.05) == pytest.approx(0.05, abs=1e-9)
    assert paired_power(0.05, 0.00971, 3, 0.05 / 3) == pytest.approx(0.7359, abs=1e-3)
    # large n: the normal approximation Phi(0.3 sqrt(200) - 1.96) = Phi(2.2826) = 0.9888
    assert paired_power(0.3, 1.0, 200, 0.05) == pytest.approx(0.9888, abs=2e-3)
    assert math.isnan(paired_power(0.1, 0.1, 1, 0.05)) and math.isnan(paired_power(0.1, 0.0, 4, 0.05))
