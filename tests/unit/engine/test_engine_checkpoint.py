"""Kill-safe checkpoints."""

import os
import random
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from fp8rl.config import ArchConfig
from fp8rl.engine.checkpoint import (
    CheckpointError,
    has_checkpoint,
    load_checkpoint,
    save_checkpoint,
    set_rng_state,
)
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


@pytest.mark.parametrize("extra", ["chat_template.jinja", "added_tokens.json", "sub"])
def test_a_file_the_state_does_not_record_is_named(saved, extra):
    """A chat template added to a finished checkpoint would change the eval's prompts unseen."""
    ckpt, _, _ = saved
    if extra == "sub":
        (ckpt / extra).mkdir()
    else:
        (ckpt / extra).write_text("{{ messages[0]['content'] }}")
    with pytest.raises(CheckpointError, match=rf"{extra}: not a file the checkpoint recorded in state\.json"):
        load_checkpoint(ckpt)


def test_kill_between_renames_recovers_the_previous_checkpoint(saved):
    ckpt, _, _ = saved
    old = ckpt.with_name("checkpoint.old")
    ckpt.rename(old)  # as if killed after moving the old one aside, before the new one arrived
    (ckpt.parent / ".checkpoint.abc.tmp").mkdir()  # a half-written new one
    assert has_checkpoint(ckpt)
    assert load_checkpoint(ckpt)[0]["step"] == 4
    assert not (ckpt.parent / ".checkpoint.abc.tmp").exists()


class _Payload:
    """Unpickling this would run code: it touches `marker`."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_checkpoint_holding_a_pickled_object_is_refused(saved, tmp_path):
    ckpt, model, _ = saved
    marker = tmp_path / "code-ran"
    save_checkpoint(ckpt, model, build_char_tokenizer(), {"evil": _Payload(marker)}, {"step": 1})
    with pytest.raises(CheckpointError, match=r"trainer_state\.pt: holds objects other than tensors"):
        load_checkpoint(ckpt)
    assert not marker.exists()


def test_numpy_rng_round_trips_as_tensors_and_plain_values(saved):
    ckpt, model, _ = saved
    np.random.seed(11)
    np.random.standard_normal()  # leaves a cached gaussian in the state
    save_checkpoint(ckpt, model, build_char_tokenizer(), {}, {"step": 1})
    expected = np.random.standard_normal(5)
    np.random.seed(0)
    _, state = load_checkpoint(ckpt)
    set_rng_state(state["rng"])
    assert np.array_equal(np.random.standard_normal(5), expected)


def test_files_have_the_usual_modes_and_are_fsynced_before_the_rename(saved, tmp_path, monkeypatch):
    ckpt, model, _ = saved
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd))
    )
    save_checkpoint(ckpt, model, build_char_tokenizer(), {}, {"step": 2})
    names = {Path(p).name for p in synced}
    assert {"trainer_state.pt", "state.json", "model.safetensors"} <= names
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(ckpt.stat().st_mode) == 0o777 & ~umask
    for f in ckpt.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~umask, f.name


def test_a_leftover_old_checkpoint_is_removed_on_resume(saved):
    ckpt, _, _ = saved
    old = ckpt.with_name("checkpoint.old")
    shutil.copytree(ckpt, old)  # killed after the new one arrived, before the old one was removed
    assert has_checkpoint(ckpt)
    assert not old.exists() and load_checkpoint(ckpt)[0]["step"] == 4
