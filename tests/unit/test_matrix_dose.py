"""The dose axis (`matrix.noise_scales`): run ids with a noise segment, per-variant doses, dose seeds, and
the run's config carrying its dose."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fp8rl.config import ExperimentConfig
from fp8rl.matrix import RunSpec, expand_matrix, find_run, reference_run, run_config

BASE = {
    "tier": "stress",
    "models": [{"name": "m", "source": "scratch"}],
    "matrix": {
        "algorithms": ["grpo"],
        "models": ["m"],
        "variants": ["bf16", "fp8", "fp8_tis", "fp8_calib"],
        "seeds": [0, 1, 2],
    },
}


def cfg_with(**matrix) -> ExperimentConfig:
    return ExperimentConfig.model_validate({**BASE, "matrix": {**BASE["matrix"], **matrix}})


def test_without_the_axis_run_ids_are_unchanged():
    ids = [r.run_id for r in expand_matrix(cfg_with())]
    assert ids[0] == "grpo/m/bf16/none/seed0" and all("noise" not in i for i in ids)


def test_dose_axis_per_variant_and_dose_seeds():
    cfg = cfg_with(noise_scales=[1, 2, 8], variant_noise_scales={"fp8_tis": [1]}, dose_seeds=[0])
    runs = expand_matrix(cfg)
    by = {
        (r.variant, r.noise): sorted(x.seed for x in runs if (x.variant, x.noise) == (r.variant, r.noise))
        for r in runs
    }
    assert by == {
        ("bf16", 1.0): [0, 1, 2],  # nothing quantized: dose 1 only
        ("fp8", 1.0): [0, 1, 2],
        ("fp8", 2.0): [0],
        ("fp8", 8.0): [0],
        ("fp8_tis", 1.0): [0, 1, 2],
        ("fp8_calib", 1.0): [0, 1, 2],
        ("fp8_calib", 2.0): [0],
        ("fp8_calib", 8.0): [0],
    }
    assert "grpo/m/fp8/tensorwise/noise2/seed0" in {r.run_id for r in runs}
    assert [r.run_id for r in expand_matrix(cfg, noise=["8"])] == [
        "grpo/m/fp8/tensorwise/noise8/seed0",
        "grpo/m/fp8_calib/tensorwise/noise8/seed0",
    ]
    assert reference_run(find_run(cfg, "grpo/m/fp8_calib/tensorwise/noise8/seed0")).run_id == (
        "grpo/m/bf16/none/noise1/seed0"
    )


@pytest.mark.parametrize("run_id", ["grpo/m/fp8/tensorwise/noise0.5/seed3", "grpo/m/bf16/none/seed0"])
def test_parse_inverts_run_id(run_id):
    assert RunSpec.parse(run_id).run_id == run_id


@pytest.mark.parametrize(
    ("run_id", "match"),
    [
        ("grpo/m/fp8/tensorwise/noisex/seed0", "noise<number>"),
        ("grpo/m/fp8/tensorwise/noise0/seed0", "positive dose"),
        ("grpo/m/fp8/tensorwise/noise02/seed0", "positive dose"),
        ("grpo/m/fp8/tensorwise/dose2/seed0", "form"),
    ],
)
def test_parse_rejects_bad_dose_segments(run_id, match):
    with pytest.raises(ValueError, match=match):
        RunSpec.parse(run_id)


def test_run_config_applies_the_dose():
    cfg = cfg_with(noise_scales=[1, 4])
    run = find_run(cfg, "grpo/m/fp8/tensorwise/noise4/seed1")
    assert run_config(cfg, run).fp8.noise_scale == 4.0 and cfg.fp8.noise_scale == 1.0
    plain = cfg_with()
    assert run_config(plain, expand_matrix(plain)[0]) is plain
    with pytest.raises(ValueError, match="not in the matrix"):
        find_run(cfg, "grpo/m/fp8_tis/tensorwise/noise3/seed0")


@pytest.mark.parametrize(
    ("matrix", "match"),
    [
        ({"variant_noise_scales": {"fp8": [2]}}, "needs the dose axis"),
        ({"dose_seeds": [0]}, "needs the dose axis"),
        ({"noise_scales": [1, 1]}, "duplicate"),
        ({"noise_scales": [0]}, "greater than 0"),
        ({"noise_scales": [1], "variant_noise_scales": {"bf16": [2]}}, "dose 1 only"),
    ],
)
def test_bad_dose_axes(matrix, match):
    with pytest.raises(ValidationError, match=match):
        cfg_with(**matrix)
