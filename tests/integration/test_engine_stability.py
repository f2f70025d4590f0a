"""The trainer's divergence handling on the tiny tier: a collapsing run is `diverged` (not `ok`), `continue`
mode records the whole trajectory after the first detection, and a run resumed in the middle of a diverged
trajectory keeps its first detection and writes what an uninterrupted run writes."""

from __future__ import annotations

import json

import pytest

COLLAPSE = {"schedule.steps": 7, "schedule.lr": 1.0, "schedule.checkpoint_every": 3}
# A detector every run trips for sure: an entropy floor of 100 nats, held for 2 steps (detected at step 2).
ALWAYS = {"stability.entropy_floor": 100.0, "stability.patience": 2}


def test_lr_1_collapse_is_diverged_not_ok(tier, train, tmp_path, restore_torch_globals):
    _, summary, rows = train("grpo/tiny/bf16/none/seed0", tmp_path / "run", COLLAPSE)
    assert summary["status"] == "diverged", summary
    d = summary["divergence"]
    assert d["kind"] in ("entropy_collapse", "gibberish", "reward_collapse", "non_finite", "entropy_spike")
    assert summary["reason"] == d["reason"] and summary["step"] == d["step"] == rows[-1]["step"] < 7


def test_continue_mode_records_the_whole_trajectory(tier, train, tmp_path, restore_torch_globals):
    over = {"schedule.steps": 5, "stability.on_divergence": "continue", **ALWAYS}
    _, summary, rows = train("grpo/tiny/bf16/none/seed0", tmp_path / "run", over)
    d = summary["divergence"]
    assert summary["status"] == "diverged" and d["kind"] == "entropy_collapse" and d["step"] == 2
    assert summary["step"] == 5 and [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert summary["reason"] == d["reason"] and "steps 1-2" in d["reason"]
    stopped = {**over, "stability.on_divergence": "stop"}
    _, s2, rows2 = train("grpo/tiny/bf16/none/seed0", tmp_path / "stop", stopped)
    assert s2["step"] == 2 and [r["step"] for r in rows2] == [1, 2] and s2["divergence"] == d


@pytest.mark.slow
def test_resume_in_the_middle_of_a_diverged_trajectory(tier, train, tmp_path, restore_torch_globals):
    """Checkpoint at step 4, after the detection at step 2; the run is cut there and resumed to step 6."""
    over = {
        "schedule.steps": 6,
        "schedule.checkpoint_every": 4,
        "stability.on_divergence": "continue",
        **ALWAYS,
    }
    _, straight, rows = train("grpo/tiny/fp8/tensorwise/seed0", tmp_path / "straight", over)
    out = tmp_path / "cut"
    import fp8rl.engine.trainer as trainer_mod

    class Killed(BaseException):  # like SIGKILL: no summary, the step-4 checkpoint stays
        pass

    real = trainer_mod.Trainer.train_step

    def dies_at_5(self, step):
        if step == 5:
            raise Killed
        return real(self, step)

    trainer_mod.Trainer.train_step = dies_at_5
    seen = []
    try:
        with pytest.raises(Killed):
            train("grpo/tiny/fp8/tensorwise/seed0", out, over)
        assert not (out / "summary.json").exists()
        trainer_mod.Trainer.train_step = lambda self, step: seen.append(step) or real(self, step)
        _, resumed, again = train("grpo/tiny/fp8/tensorwise/seed0", out, over)
    finally:
        trainer_mod.Trainer.train_step = real
    assert seen == [5, 6]  # resumed, not restarted
    assert resumed["divergence"] == straight["divergence"] and resumed["status"] == "diverged"

    def strip(rs):
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rs]

    assert strip(again) == strip(rows)
    assert json.loads((out / "summary.json").read_text())["step"] == 6


def test_weights_that_blow_up_are_a_non_finite_divergence(tier, train, tmp_path, restore_torch_globals):
    """weight_decay 1e300: the weights are inf after step 1's update (step 2's sampler raised on a NaN
    probability, and the run was `failed`): the run is `diverged` (`non_finite`, exit 0 for the DAG) at
    step 1 and keeps a loadable checkpoint of finite weights; NaN logits in the sampler are a divergence."""
    import torch

    from fp8rl.engine.divergence import Diverged
    from fp8rl.engine.sampler import sample_tokens

    over = {
        "schedule.weight_decay": 1e300,
        "schedule.mini_batches": 1,
        "limits": {"schedule.weight_decay": 1e300},
    }
    _, summary, _ = train("grpo/tiny/bf16/none/seed0", tmp_path / "run", over)
    assert summary["status"] == "diverged", summary
    assert summary["divergence"]["kind"] == "non_finite" and summary["step"] == 1, summary
    assert "non-finite weights (model.embed_tokens.weight) after the optimizer step" in summary["reason"]
    state = json.loads((tmp_path / "run" / "checkpoint" / "state.json").read_text())
    assert state["step"] == 0  # the base model's weights: none of the run's were finite
    logits = torch.zeros(2, 5)
    logits[1, 3] = float("nan")
    for greedy in (True, False):
        with pytest.raises(Diverged, match="non-finite sampling distribution"):
            sample_tokens(logits, temperature=1.0, top_p=1.0, generator=None, greedy=greedy)
