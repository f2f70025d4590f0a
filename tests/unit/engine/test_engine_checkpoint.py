"""Kill-safe checkpoints."""

import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from fp8rl.config import ArchConfig
from fp8rl.engine.checkpoint import CheckpointError, has_checkpoint, load_checkpoint, save_checkpoint
from fp8rl.engine.model import build_model
from fp8rl.engine.tokenizer import build_char_tokenizer

ARCH = ArchConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=16)


@pytest.fixture
def saved(tmp_path):
    tok = build_char_tokenizer()
    model = build_model(ARCH, tok, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[5, 6, 7]])).logits.sum().backward()
    opt.step()
    torch.manual_seed(123)
    random.seed(5)
    state = {"policy": model.state_dict(), "optimizer": opt.state_dict(), "calibrator": {"low": 0.7}}
    save_checkpoint(
        tmp_path / "checkpoint", model, tok, state, {"step": 4, "metrics_offset": 99, "run_id": "r"}
    )
    return tmp_path / "checkpoint", model, opt


def test_round_trip_restores_weights_optimizer_and_rngs(saved):
    ckpt, model, opt = saved
    expected_torch, expected_py = torch.rand(3), random.random()
    meta, state = load_checkpoint(ckpt)
    assert meta["step"] == 4 and meta["metrics_offset"] == 99
    for k, v in model.state_dict().items():
        assert torch.equal(state["policy"][k], v)
    assert state["optimizer"]["state"][0]["step"] == opt.state_dict()["state"][0]["step"]
    from fp8rl.engine.checkpoint import set_rng_state

    set_rng_state(state["rng"])
    assert torch.equal(torch.rand(3), expected_torch) and random.random() == expected_py
    loaded = AutoModelForCausalLM.from_pretrained(ckpt)  # still a plain HF model directory
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)


@pytest.mark.parametrize("victim", ["trainer_state.pt", "model.safetensors", "state.json"])
def test_corrupt_or_missing_files_are_named(saved, victim):
    ckpt, _, _ = saved
    path = ckpt / victim
    path.write_bytes(path.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(CheckpointError, match=victim.replace(".", r"\.")):
        load_checkpoint(ckpt)
    path.unlink()
    with pytest.raises(CheckpointError, match=victim.replace(".", r"\.")):
        load_checkpoint(ckpt)


def test_kill_between_renames_recovers_the_previous_checkpoint(saved):
    ckpt, _, _ = saved
    old = ckpt.with_name("checkpoint.old")
    ckpt.rename(old)  # as if killed after moving the old one aside, before the new one arrived
    (ckpt.parent / ".checkpoint.abc.tmp").mkdir()  # a half-written new one
    assert has_checkpoint(ckpt)
    assert load_checkpoint(ckpt)[0]["step"] == 4
    assert not (ckpt.parent / ".checkpoint.abc.tmp").exists()
