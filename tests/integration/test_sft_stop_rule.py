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
    never = {**steps, "sft.stop_at_accuracy": 1.0, "sft.check_every": 20}
    _, ever = _sft(tmp_path, "ever", {**never, "sft.on_unmet_stop": "keep"})
    assert ever["stop_met"] is False
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


def test_a_base_that_misses_the_rule_is_refused_unless_kept_and_then_named(tmp_path, capsys):
    """The stop rule's failure branch: by default a base that reaches its step cap without meeting the
    target is refused (exit 1, naming it, no base written); `on_unmet_stop: keep` keeps it, and the base
    models table and SUMMARY.md's caveats name it."""
    from fp8rl.cli import main
    from fp8rl.engine.sft import SFTStopUnmet
    from fp8rl.report.base_models import base_model_table
    from fp8rl.report.summary_page import _caveats

    never = {"sft.steps": 40, "sft.batch_size": 16, "sft.stop_at_accuracy": 1.0, "sft.check_every": 20}
    with pytest.raises(SFTStopUnmet, match=r"base tiny: the SFT reached its 40-step cap without meeting "
                       r"sft.stop_at_accuracy 1 \(last check: [0-9.]+ at step 20\)"):  # fmt: skip
        _sft(tmp_path, "refused", never)
    assert not (tmp_path / "refused").exists()
    config = write_config(tmp_path / "cli.yaml", never)
    out = tmp_path / "tier" / "base" / "tiny"
    args = [
        "sft",
        "--config",
        str(config),
        "--model",
        "tiny",
        "--data",
        str(tmp_path / "data"),
        "--out",
        str(out),
    ]
    assert main([*args, "--no-progress"]) == 1
    assert "without meeting sft.stop_at_accuracy" in capsys.readouterr().err and not out.exists()

    cfg = load_config(write_config(tmp_path / "keep.yaml", {**never, "sft.on_unmet_stop": "keep"}))
    run_sft(cfg, "tiny", tmp_path / "data", out, progress=False)
    bases = base_model_table(tmp_path / "tier")
    assert bases["stop_met"].tolist() == [False] and bases["steps"].tolist() == [40]
    caveat = [line for line in _caveats(cfg, None, False, bases) if "missed the SFT stop rule" in line]
    assert caveat and "Base tiny missed the SFT stop rule" in caveat[0] and "40-step cap" in caveat[0]
