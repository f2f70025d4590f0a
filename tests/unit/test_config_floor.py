"""The `bf16_floor` arm's config: the `floor` section, what a floor run resolves to, and that the arm is
opt-in (every other run of a tier keeps its digest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fp8rl.config import FloorConfig, RunSpec, resolve_run
from fp8rl.config_loader import ConfigError, load_config
from fp8rl.vocabulary import REAL_BF16_KL, VARIANT_SPECS

CONFIG = Path(__file__).resolve().parents[2] / "config"
WITH_FLOOR = "matrix.variants=[bf16, bf16_floor, fp8, fp8_tis]"
FLOOR_RUN = RunSpec("grpo", "tiny", "bf16_floor", "none", 0, "none")


def test_the_arm_is_bf16_with_a_floor():
    spec = VARIANT_SPECS["bf16_floor"]
    assert spec.precision == "bf16" and spec.floor and not spec.fp8 and not spec.corrected
    assert not any(s.floor for v, s in VARIANT_SPECS.items() if v != "bf16_floor")


def test_a_floor_run_searches_for_the_real_bf16_kl_by_default():
    cfg = load_config(CONFIG / "learn.yaml", [WITH_FLOOR])
    assert cfg.floor is None and "floor" not in cfg.model_dump()  # the section is the defaults
    floor = resolve_run(cfg, FLOOR_RUN)
    assert floor.floor == FloorConfig() and floor.target_kl == REAL_BF16_KL == 2e-3
    assert floor.floor_scale == 0.0 and floor.noise_scale == 1.0  # no FP8 dose; its scale is searched
    found = floor.with_noise_scale(17.5)
    assert found.floor_scale == found.mismatch_scale == 17.5 and found.target_kl == REAL_BF16_KL
    assert found.fp8 == floor.fp8 and found.train_digest == floor.train_digest
    for run in cfg.runs():
        if run.variant != "bf16_floor":
            r = resolve_run(cfg, run)
            assert r.floor is None and r.floor_scale == 0.0 and r.target_kl is None
            assert r.mismatch_scale == r.noise_scale


def test_a_fixed_scale_replaces_the_search():
    cfg = load_config(CONFIG / "learn.yaml", [WITH_FLOOR, "floor.scale=8"])
    run = resolve_run(cfg, FLOOR_RUN)
    assert run.target_kl is None and run.floor_scale == run.mismatch_scale == 8.0
    with pytest.raises(ConfigError, match=r"floor.scale: Input should be less than or equal to 64"):
        load_config(CONFIG / "learn.yaml", [WITH_FLOOR, "floor.scale=65"])
    with pytest.raises(ConfigError, match=r"floor: give target_kl \(e.g. 0.002\) or scale"):
        load_config(CONFIG / "learn.yaml", [WITH_FLOOR, "floor.target_kl=null"])


def test_the_arm_is_opt_in_every_other_run_keeps_its_digest():
    # the smoke tier has no floor arm: adding one changes no other run's digest (learn.yaml has one now)
    plain = load_config(CONFIG / "smoke.yaml")
    variants = ", ".join(["bf16", "bf16_floor", *[v for v in plain.matrix.variants if v != "bf16"]])
    floored = load_config(CONFIG / "smoke.yaml", [f"matrix.variants=[{variants}]", "floor.target_kl=1e-3"])
    assert floored.floor is not None and floored.floor.target_kl == 1e-3
    before = {r.run_id: resolve_run(plain, r).train_digest for r in plain.runs()}
    after = {r.run_id: resolve_run(floored, r).train_digest for r in floored.runs()}
    assert {k: after[k] for k in before} == before
    new = sorted(set(after) - set(before))
    assert len(new) == len(plain.matrix.algorithms) * len(plain.matrix.seeds)
    assert all(run_id.split("/")[2] == "bf16_floor" for run_id in new)
    # the floor run's digest names its target
    default = load_config(CONFIG / "learn.yaml")
    target = load_config(CONFIG / "learn.yaml", ["floor.target_kl=1e-3"])
    assert resolve_run(default, FLOOR_RUN).train_digest != resolve_run(target, FLOOR_RUN).train_digest
