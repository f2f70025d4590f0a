"""`resolve_run`: one run's settings from (config, run spec), the one value the trainer, the precision
setup, the verl adapter, `fp8rl train`, the Snakefile and the report read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fp8rl.config import TRAIN_SECTIONS, ResolvedRun, RunSpec, resolve_run
from fp8rl.config_loader import load_config

CONFIG = Path(__file__).resolve().parents[2] / "config"


def test_a_condition_is_applied_and_the_doses_split_by_path():
    cfg = load_config(CONFIG / "attribution.yaml")
    trainer_only = resolve_run(cfg, RunSpec("grpo", "chain", "fp8", "tensorwise", 0, "s4_trainer"))
    assert trainer_only.fp8.noise_scale == 4.0 and trainer_only.noise_scale == 4.0
    assert trainer_only.rollout_noise_scale == 1.0
    assert trainer_only.fp8.format == cfg.fp8.format  # the tier's section under the condition's overrides
    phantom = resolve_run(cfg, RunSpec("grpo", "chain", "fp8_calib", "tensorwise", 1, "phantom"))
    assert phantom.ratio_noise == 1.5 and not phantom.fp8.gemms
    bf16 = resolve_run(cfg, RunSpec("grpo", "chain", "bf16", "none", 0, "none"))
    assert bf16.fp8 == cfg.fp8 and bf16.noise_scale == bf16.rollout_noise_scale == 1.0
    assert bf16.ratio_noise == 0.0 and not bf16.needs_reference
    with pytest.raises(KeyError, match="no condition named"):
        resolve_run(cfg, RunSpec("grpo", "chain", "fp8", "tensorwise", 0, "s9"))


def test_bounds_algorithm_and_digest_are_the_runs_own():
    cfg = load_config(CONFIG / "smoke.yaml")
    grpo = resolve_run(cfg, RunSpec("grpo", "tiny", "fp8", "tensorwise", 0))
    dapo = resolve_run(cfg, RunSpec("dapo", "tiny", "fp8", "tensorwise", 0))
    assert grpo.algo is cfg.algorithms.grpo and dapo.algo is cfg.algorithms.dapo
    assert grpo.bounds == (1 - cfg.algorithms.grpo.clip_low, 1 + cfg.algorithms.grpo.clip_high)
    assert dapo.bounds.high == pytest.approx(1 + cfg.algorithms.dapo.clip_high) and dapo.bounds != grpo.bounds
    assert grpo.bounds is grpo.bounds  # made once
    assert grpo.model is cfg.model("tiny") and grpo.calib is cfg.calib and grpo.tis is cfg.tis
    assert grpo.train_digest == cfg.section_digest(*TRAIN_SECTIONS, model="tiny")
    assert dapo.train_digest == grpo.train_digest  # the algorithm section is part of TRAIN_SECTIONS
    shifted = load_config(CONFIG / "smoke.yaml", ["schedule.lr=1e-4"])
    assert resolve_run(shifted, grpo.spec).train_digest != grpo.train_digest


def test_digest_differs_between_conditions_and_the_object_is_frozen():
    cfg = load_config(CONFIG / "attribution.yaml")
    a, b = (
        resolve_run(cfg, RunSpec("grpo", "chain", "fp8", "tensorwise", 0, c)) for c in ("s4", "s4_trainer")
    )
    assert a.train_digest != b.train_digest
    assert resolve_run(cfg, a) is a  # a resolved run resolves to itself
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.fp8 = b.fp8  # type: ignore[misc]
    assert isinstance(a, ResolvedRun) and a.run_id == "grpo/chain/fp8/tensorwise/s4/seed0"


def test_the_reference_run_is_named_only_for_calibrated_runs_against_a_run():
    shadow = load_config(CONFIG / "smoke.yaml")
    calib = RunSpec("grpo", "tiny", "fp8_calib", "tensorwise", 2)
    assert resolve_run(shadow, calib).reference is None
    cfg = load_config(CONFIG / "smoke.yaml", ["calib.reference=run"])
    run = resolve_run(cfg, calib)
    assert run.needs_reference and run.reference == RunSpec("grpo", "tiny", "bf16", "none", 2)
    assert resolve_run(cfg, RunSpec("grpo", "tiny", "fp8_tis", "tensorwise", 2)).reference is None
