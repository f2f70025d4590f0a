"""benchmarks/calib_cadence.py times the two arms at a fixed noise: its config copy drops every
condition's target KL (no search before step 1) and keeps what sets the arms apart (`calib.every`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fp8rl.config_loader import load_config

REPO = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("calib_cadence", REPO / "benchmarks" / "calib_cadence.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fixed_noise_config_replaces_the_target_and_keeps_the_cadence(tmp_path):
    cc = _load()
    original = load_config(REPO / "config" / "corrections.yaml", [])
    targets = {c.name: c.fp8.get("target_kl") for c in original.matrix.conditions if c.fp8}
    every = [c.name for c in original.matrix.conditions if c.calib and c.calib.get("every")]
    assert len(targets) == 2 and len(set(targets.values())) == 1 and len(every) == 1  # one setting, twice
    (per_update,) = set(targets) - set(every)
    cfg = load_config(
        cc.fixed_noise_config(REPO / "config" / "corrections.yaml", 4.5, tmp_path / "c.yaml"), []
    )
    for name in targets:
        assert cfg.fp8_for(name).target_kl is None and cfg.fp8_for(name).noise_scale == 4.5
    assert cfg.calib_for(every[0]).every == 20 and cfg.calib_for(per_update).every is None
    assert cfg.base_digest("story") == original.base_digest("story")  # the same base serves both
