"""The attribution tier's knobs in the engine: synthetic ratio noise (fp8rl.engine.ratio_noise) and the
rollout copy's own noise dose (fp8rl.engine.precision.rollout_runtime)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from fp8rl.config import RunSpec, resolve_run
from fp8rl.config_loader import load_config
from fp8rl.engine.precision import rollout_runtime
from fp8rl.engine.ratio_noise import RatioNoise
from fp8rl.fp8 import FP8Runtime


def test_level_zero_is_the_identity():
    lp = torch.randn(3, 5, requires_grad=True)
    noise = RatioNoise(0.0)
    noise.start_step(0, 1)
    assert noise.apply(lp, lp.detach()) is lp


def test_noise_is_seeded_sized_and_carries_no_gradient():
    torch.manual_seed(0)
    old = torch.full((400, 50), math.log(0.5))  # p_old = 1/2: std sqrt(2) * level * 0.5
    lp = old.clone().requires_grad_(True)
    a, b = RatioNoise(0.4), RatioNoise(0.4)
    a.start_step(3, 7)
    b.start_step(3, 7)
    out_a, out_b = a.apply(lp, old), b.apply(lp, old)
    assert torch.equal(out_a, out_b)  # same (seed, step): same draws
    assert not torch.equal(a.apply(lp, old), out_a)  # the next update draws anew
    e = (out_a - lp).detach()
    assert float(e.std()) == pytest.approx(math.sqrt(2) * 0.4 * 0.5, rel=0.03)
    out_a.sum().backward()
    assert torch.equal(lp.grad, torch.ones_like(lp))  # d(lp + e)/d lp = 1: the gradient is clean
    sure = torch.zeros(2, 3)  # p_old = 1: a certain token's log-prob does not move
    c = RatioNoise(0.4)
    c.start_step(0, 1)
    assert torch.equal(c.apply(sure, sure), sure)
    with pytest.raises(RuntimeError, match="start_step"):
        RatioNoise(0.1).apply(lp, old)
    with pytest.raises(ValueError):
        RatioNoise(-1.0)


def test_rollout_runtime_splits_the_dose_by_path():
    cfg = load_config(Path(__file__).resolve().parents[3] / "config/attribution.yaml")
    run = {
        c: resolve_run(cfg, RunSpec("grpo", "chain", "fp8", "tensorwise", 0, c)) for c in ("s4", "s4_trainer")
    }
    bf16 = resolve_run(cfg, RunSpec("grpo", "chain", "bf16", "none", 0, "none"))
    rt = FP8Runtime(noise_scale=run["s4"].noise_scale)
    assert rt.noise_scale == 4.0 and bf16.noise_scale == bf16.rollout_noise_scale == 1.0
    assert rollout_runtime(rt, run["s4"]) is rt  # one dose: the same runtime
    plain = FP8Runtime()
    assert rollout_runtime(plain, bf16) is plain  # not an FP8 variant: no dose of its own
    split = rollout_runtime(rt, run["s4_trainer"])
    assert split is not rt and split.noise_scale == 1.0 and rt.noise_scale == 4.0
    assert split.gemms is rt.gemms and split.compiled == rt.compiled  # GEMM counts stay shared
    with pytest.raises(ValueError, match="dose"):
        FP8Runtime(noise_scale=float("nan"))
