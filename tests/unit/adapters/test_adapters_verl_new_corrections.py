"""The corrections verl 0.9.1 cannot hand their inputs to a policy loss are refused by name, with the
config key that names them, before a job is written; the others keep their verl settings (adaptive
IcePop and QuRL through their own losses: test_adapters_verl_icepop.py, test_adapters_verl_qurl.py;
score centering's refusal at `fp8rl config validate`: test_adapters_verl_scorecenter.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fp8rl.adapters.verl_corrections import NOT_ON_VERL, check_corrections
from fp8rl.adapters.verl_model import AdapterError
from fp8rl.config import TISConfig
from fp8rl.vocabulary import CORRECTIONS, VARIANT_SPECS

VARIANTS = list(VARIANT_SPECS)
CFG = SimpleNamespace(tis=TISConfig(), matrix=SimpleNamespace(variants=VARIANTS))


@pytest.mark.parametrize("variant", ["fp8_scorecenter", "fp8_tis_scorecenter"])
def test_refused_with_the_variants_key_and_what_verl_lacks(variant):
    why = check_corrections(CFG, VARIANT_SPECS[variant])
    assert isinstance(why, AdapterError)
    assert why.key == ("matrix", "variants", VARIANTS.index(variant))
    msg = str(why)
    assert msg.startswith(
        f"matrix.variants: {variant}: correction '{VARIANT_SPECS[variant].correction}' cannot"
    )
    for needle in (
        "top-k next-token ids and log-probs",
        "vLLMHttpServer.generate",
        "ppo_loss",
        "backend 'reference'",
    ):
        assert needle in msg, needle
    assert ("pi_old at those ids" in msg) == (variant == "fp8_tis_scorecenter")


def test_a_variant_outside_the_matrix_list_is_keyed_by_the_list():
    cfg = SimpleNamespace(tis=TISConfig(), matrix=SimpleNamespace(variants=["bf16"]))
    assert check_corrections(cfg, VARIANT_SPECS["fp8_scorecenter"]).key == ("matrix", "variants")


def test_an_icepop_band_from_zero_is_keyed_by_tis_icepop():
    cfg = SimpleNamespace(tis=TISConfig(icepop=(0.0, 2.0)), matrix=SimpleNamespace(variants=VARIANTS))
    why = check_corrections(cfg, VARIANT_SPECS["fp8_icepop"])
    assert why.key == ("tis", "icepop") and str(why).startswith("tis.icepop: ")


def test_the_earlier_corrections_still_run_on_verl():
    assert set(NOT_ON_VERL) <= set(CORRECTIONS)
    for name, spec in VARIANT_SPECS.items():
        if spec.correction not in NOT_ON_VERL:
            assert check_corrections(CFG, spec) is None, name


def test_adaptive_icepop_runs_on_verl_through_its_loss():
    from fp8rl.adapters.verl_corrections import RAW_RATIO_THRESHOLD, correction_overrides, policy_loss_mode

    spec = VARIANT_SPECS["fp8_icepop_adaptive"]
    assert check_corrections(CFG, spec) is None
    assert policy_loss_mode(spec) == "fp8rl_icepop_adaptive"
    ov = correction_overrides(CFG, spec)
    assert ov["algorithm.rollout_correction.rollout_is"] == "token"
    assert ov["algorithm.rollout_correction.rollout_is_threshold"] == RAW_RATIO_THRESHOLD


def test_qurl_runs_on_verl_through_its_loss():
    from fp8rl.adapters.verl_corrections import policy_loss_mode

    spec = VARIANT_SPECS["fp8_qurl"]
    assert check_corrections(CFG, spec) is None
    assert policy_loss_mode(spec) == "fp8rl_qurl"


def test_a_correction_verl_has_no_mapping_for_is_refused_by_name():
    spec = SimpleNamespace(name="fp8_new_one", correction="new_one", calib=False)  # a module added later
    why = check_corrections(CFG, spec)
    assert why is not None and "'new_one'" in str(why) and "ROLLOUT_IS" in str(why)
    assert why.key == ("matrix", "variants")
