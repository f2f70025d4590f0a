"""`acc/mean` on the verl path: the fraction of a training step's rollouts whose answer was right.

verl 0.9.1's v1 trainer logs the reward manager's `acc` for validation only. Every reward manager of its
reward loop (naive, dapo, ...; verl.experimental.reward_loop.reward_manager) stores `acc` in each
sample's `reward_extra_info` (the rule-based scorer's `acc`, e.g. `math_dapo`'s, or the score of a scorer
that returns a number), which the agent loop keeps in the sample's `extra_fields` in TransferQueue
(where the DAPO group filter reads it: `algorithm.filter_groups.metric: acc`). Its training metrics
(`PPOTrainer._compute_metrics`) read the rollout's rewards but not those fields.

`wrap` adds, after verl's own `_compute_metrics`, `acc/mean` (fp8rl.vocabulary.ACC_MEAN): the mean `acc`
of the step's samples, padding left out, read with the same `tq.kv_batch_get(select_fields=
["extra_fields"])` verl's speculative-decoding metrics use, before verl clears the step's data. A step
with a sample without `acc` logs none (absent, never 0). Unlike `critic/score/mean` it is not shifted
by DAPO's overlong penalty or `math_dapo`'s -1 for a wrong answer. fp8rl.adapters.verl_loss installs it
when verl imports it (`VERL_USE_EXTERNAL_MODULES`: every process, the trainer's too), patching
`verl.trainer.ppo.v1.trainer_base` as soon as that module is loaded.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Iterable
from typing import Any

from fp8rl.adapters.import_patch import patch_class
from fp8rl.vocabulary import ACC_MEAN

MODULE = "verl.trainer.ppo.v1.trainer_base"
CLASS = "PPOTrainer"
ACC_KEY = "acc"  # the key verl's reward managers store the answer's correctness under


def step_accuracy(extra_fields: Iterable[Any], tags: Iterable[dict]) -> float | None:
    """The mean `acc` of `reward_extra_info` over the samples whose tag is not padding; None when a
    sample has none (or a non-finite one) or there is no sample."""
    values = []
    for field, tag in zip(extra_fields, tags, strict=True):
        if isinstance(tag, dict) and tag.get("is_padding", False):
            continue
        info = field.get("reward_extra_info") if isinstance(field, dict) else None
        value = info.get(ACC_KEY) if isinstance(info, dict) else None
        if value is None or isinstance(value, str) or not math.isfinite(float(value)):
            return None
        values.append(float(value))
    return sum(values) / len(values) if values else None


def wrap(cls: type) -> type:
    """Wrap `cls._compute_metrics` to add `acc/mean` (once)."""
    if getattr(cls, "_fp8rl_acc_mean", False):
        return cls
    compute = cls._compute_metrics

    @functools.wraps(compute)
    def _compute_metrics(self, batch, metrics, *args, **kwargs):
        out = compute(self, batch, metrics, *args, **kwargs)
        tq = sys.modules[MODULE].tq
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"]
        )
        acc = step_accuracy(data.pop("extra_fields").tolist(), batch.tags)
        if acc is not None:
            metrics[ACC_MEAN] = acc
        return out

    cls._compute_metrics = _compute_metrics
    cls._fp8rl_acc_mean = True
    return cls


def install() -> None:
    """Log `acc/mean` in this process: now if verl's trainer module is loaded, else when it is."""
    patch_class(MODULE, CLASS, wrap)
