"""`sft.stop_at_accuracy`: the SFT stops at the first check where the base samples right answers to the
target share of a fixed set of training prompts, its batches are those of a run without the rule, and
configs that do not set it keep their digests (the published tiers' records stay valid)."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from fp8rl.config_loader import load_config
from fp8rl.engine.data import write_data
from fp8rl.engine.sft import run_sft
from tests.integration.conftest import write_config


def _sft(tmp_path, name, overrides):
    cfg = load_config(write_config(tmp_path / f"{name}.yaml", overrides))
    if not (tmp_path / "data").exists():
        write_data(cfg, tmp_path / "data")
    info = run_sft(cfg, "tiny", tmp_path / "data", tmp_path / name, progress=False)
    return cfg, info


def test_the_sft_stops_at_the_first_check_that_reaches_the_target(tmp_path):
    steps = {"sft.steps": 60, "sft.batch_size": 16}
    _, full = _sft(tmp_path, "full", steps)
    _, ever = _sft(tmp_path, "ever", {**steps, "sft.stop_at_accuracy": 1.0, "sft.check_every": 20})
    # A target never reached: the SFT trains every step, and the checks do not move its batches or
    # weights (their sampling has its own generator).
    assert ever["steps"] == full["steps"] == 60
    assert [step for step, _ in ever["stop_checks"]] == [20, 40]
    assert all(0.0 <= acc <= 1.0 for _, acc in ever["stop_checks"])
    assert ever["loss/final"] == full["loss/final"]
    weights = [load_file(tmp_path / name / "model.safetensors") for name in ("full", "ever")]
    assert all((weights[0][k] == weights[1][k]).all() for k in weights[0])
    # A target the first check reaches whatever it samples: the SFT stops there.
    _, low = _sft(tmp_path, "low", {**steps, "sft.stop_at_accuracy": 1e-9, "sft.check_every": 20})
    if low["stop_checks"][0][1] > 0:
        assert low["steps"] == 20 and len(low["stop_checks"]) == 1
    else:  # the tiny model sampled no right answer at step 20: it goes on to the next check
        assert low["steps"] > 20
    assert json.loads((tmp_path / "low" / "sft.json").read_text())["max_steps"] == 60


def test_a_config_without_the_rule_keeps_its_digest_and_bad_values_are_refused(tmp_path):
    plain = load_config(write_config(tmp_path / "a.yaml"))
    assert "stop_at_accuracy" not in json.dumps(plain.model_dump(mode="json"))
    ruled = load_config(write_config(tmp_path / "b.yaml", {"sft.stop_at_accuracy": 0.4}))
    assert ruled.digest() != plain.digest()
    with pytest.raises(Exception, match="stop_at_accuracy"):
        load_config(write_config(tmp_path / "c.yaml", {"sft.stop_at_accuracy": 1.5}))
