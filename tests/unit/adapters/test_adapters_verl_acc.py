"""`acc/mean` on the verl path (fp8rl.adapters.verl_acc): verl 0.9.1's v1 trainer logs the reward
manager's `acc` for validation only; fp8rl's patch of its `_compute_metrics` adds the training step's.

Runs in the verl environment (test_adapters_verl_env.py)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from fp8rl.vocabulary import ACC_MEAN


def test_the_trainer_logs_the_steps_acc_mean_from_the_reward_managers_acc(verl_site, monkeypatch):
    """Three rollouts scored by verl's `math_dapo` (the paper's data source; the reward managers copy
    its dict into `reward_extra_info`), two right, and one padding sample: `acc/mean` is 2/3, where
    `critic/score/mean` would read 1/3 (a wrong answer scores -1). The import keeps it."""
    from verl.trainer.ppo.v1 import trainer_base
    from verl.utils.reward_score import default_compute_score

    import fp8rl.adapters.verl_loss  # noqa: F401  (what VERL_USE_EXTERNAL_MODULES imports in every process)
    from fp8rl.adapters import verl_acc
    from fp8rl.adapters.verl_metrics import convert_row

    assert trainer_base.PPOTrainer._fp8rl_acc_mean  # installed when verl's trainer module loads
    scored = [default_compute_score("math_dapo", f"Answer: {a}", "4") for a in (4, 5, 4)]
    extra = [{"reward_extra_info": s} for s in scored] + [{"reward_extra_info": {"acc": False}}]
    asked = {}

    def kv_batch_get(keys, partition_id, select_fields):
        asked.update(keys=keys, partition_id=partition_id, select_fields=select_fields)
        return {"extra_fields": np.array(extra, dtype=object)}

    monkeypatch.setattr(trainer_base.tq, "kv_batch_get", kv_batch_get)

    class Trainer:  # verl's own metrics stand in: what _compute_metrics logs from the rewards
        def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
            metrics["critic/score/mean"] = 1 / 3

    verl_acc.wrap(Trainer)
    batch = SimpleNamespace(keys=["a", "b", "c", "pad"], partition_id="train",
                            tags=[{}, {}, {}, {"is_padding": True}])  # fmt: skip
    metrics: dict = {}
    Trainer()._compute_metrics(batch, metrics, {}, global_steps=1, epoch=0)
    assert asked == {"keys": batch.keys, "partition_id": "train", "select_fields": ["extra_fields"]}
    assert metrics[ACC_MEAN] == pytest.approx(2 / 3)
    assert convert_row(1, metrics)[ACC_MEAN] == pytest.approx(2 / 3)


def test_a_step_with_a_sample_without_acc_logs_no_acc_mean(verl_site):
    from fp8rl.adapters.verl_acc import step_accuracy

    right = {"reward_extra_info": {"acc": 1.0}}
    assert step_accuracy([right, {"reward_extra_info": {}}], [{}, {}]) is None
    assert step_accuracy([right, {"reward_extra_info": {"acc": math.nan}}], [{}, {}]) is None
    assert step_accuracy([right, None], [{}, {"is_padding": True}]) == 1.0
    assert step_accuracy([], []) is None
