"""`fp8rl verl train --base` is checked: a missing folder is refused rather than passed to verl as a hub
id, and a base recorded for another model (a scratch model's SFT base for qwen3-8b) is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fp8rl.adapters.verl_model import AdapterError
from fp8rl.adapters.verl_run import verl_paths
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import load_config

PAPER = Path(__file__).resolve().parents[3] / "config" / "paper.yaml"
SPEC = RunSpec.parse("grpo/qwen3-8b/bf16/none/seed0")


def test_a_missing_base_folder_is_not_taken_for_a_hub_id(tmp_path):
    cfg = load_config(PAPER)
    with pytest.raises(AdapterError, match="no such directory"):
        verl_paths(cfg, SPEC, tmp_path / "run", tmp_path / "bases" / "qwen3-8b")
    assert verl_paths(cfg, SPEC, tmp_path / "run", None).model == cfg.model("qwen3-8b").hf_id


def test_a_base_recorded_for_another_model_is_refused(tmp_path):
    cfg = load_config(PAPER)
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    (base / "sft.json").write_text(json.dumps({"model": "tiny", "parameters": 800_000}))
    with pytest.raises(AdapterError, match="a base of model 'tiny' \\(sft.json\\), not of 'qwen3-8b'"):
        verl_paths(cfg, SPEC, tmp_path / "run", base)
    (base / "sft.json").write_text(json.dumps({"model": "qwen3-8b"}))
    assert verl_paths(cfg, SPEC, tmp_path / "run", base).model == str(base)
    (base / "sft.json").unlink()
    (base / "base.json").write_text("[")
    with pytest.raises(AdapterError, match="base.json: not a readable base record"):
        verl_paths(cfg, SPEC, tmp_path / "run", base)


def test_verl_train_names_a_missing_base_and_exits_2(tmp_path, capsys):
    from fp8rl.cli import main

    data = tmp_path / "data"
    data.mkdir()
    args = ["verl", "train", "--config", str(PAPER), "--run", SPEC.run_id, "--base", str(tmp_path / "nope"),
            "--data", str(data), "--out", str(tmp_path / "run"), "--dry-run"]  # fmt: skip
    assert main(args) == 2
    assert "no such directory" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
