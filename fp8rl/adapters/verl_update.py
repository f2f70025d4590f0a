"""Which training step and which PPO update of it a verl actor worker is in, for fp8rl's calibrated loss.

verl calls a policy loss with tensors and the actor config only. The reference trainer's calibrated
clipping needs two more things per update (fp8rl.engine.update_bounds): the step, whose bf16-run
targets it uses, and whether this is the step's first update (its policy is the one that scored the
old log-probs, so the reference clips nothing). verl 0.9.1's actor runs one step's update as one call of
`TrainingWorker.train_mini_batch`, which calls `train_batch` once per mini-batch (every epoch); a
resumed run's actor first loads `.../global_step_N/actor` through `TrainingWorker.load_checkpoint`.
`install` wraps those three methods to keep `POSITION`: `step` (the last loaded save's step, plus one
per `train_mini_batch`) and `update` (1 for the step's first mini-batch, 2 for the next, ...).

The `train_batch` wrapper also turns the loss's weighted metrics into the update's values (`fold`).
verl wraps each micro-batch's loss metrics in a one-value `Metric`, all-gathers them over the DP group
and calls `Metric.aggregate_dp`, which raises unless every rank logged every key equally often. A
fraction whose population can be empty in a micro-batch (`clip/low_neg` without an A<0 token,
`ratio/p50` without a valid token) therefore reaches verl as two keys that every micro-batch logs:
`WEIGHTED_SUM + name` (its value times its population, 0 when empty) and `WEIGHTED_N + name` (the
population). Once verl has gathered one mini-batch's micro-batches over the DP ranks, `fold` replaces
each pair by `sum / n` over all of them, the update's fraction as the reference trainer computes it,
or drops it when the update had no population ("absent, never 0"); verl's step value is then the mean
over the step's updates that have it, as the reference trainer's `StepMeans`.

Before each mini-batch, the wrapper also runs what a loss registered in `PREPARE` under the worker's
`policy_loss.loss_mode` needs done once per update rather than per micro-batch, and keeps its result in
`POSITION.prepared` for the loss (`calibrated_clip`: the update's bounds, pooled over the mini-batch's
micro-batches and DP ranks; fp8rl.adapters.verl_loss.update_bounds).

A non-finite input that one rank's loss finds in one micro-batch is not raised there (the other ranks
would wait in the update's gradient all-reduce until the collective's timeout): while `train_batch`
runs, the loss records it in `POSITION.non_finite` and gives that micro-batch a zero loss
(fp8rl.adapters.verl_policy), every rank finishes the mini-batch, and the wrapper then gathers the
records over the DP group (`agree_finite`) and raises `NonFiniteLoss` on every rank together.

fp8rl.adapters.verl_loss installs it when verl imports it (every worker), patching
`verl.workers.engine_workers` as soon as that module is loaded.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fp8rl.adapters.import_patch import patch_class

MODULE = "verl.workers.engine_workers"
WEIGHTED_SUM = "fp8rl_sum/"  # + metric name: value x population, summed by fold
WEIGHTED_N = "fp8rl_n/"  # + metric name: the population
CLASS = "TrainingWorker"
_STEP_DIR = re.compile(r"global_step_(\d+)")


class NonFiniteLoss(FloatingPointError):
    """A non-finite input of the policy loss: the run diverged (recorded in the run directory's
    `verl_divergence.json` by fp8rl.adapters.verl_policy `check_finite_inputs`)."""


@dataclass
class UpdatePosition:
    """`step`: this worker's training step (None before its first update); `update`: the mini-batch
    update within it, from 1; `prepared`: what `PREPARE` gave for this update (None without it);
    `deferring`: inside a wrapped `train_batch`, where a loss records a non-finite input in
    `non_finite` instead of raising it."""

    step: int | None = None
    update: int = 0
    loaded_step: int = 0
    prepared: Any = None
    deferring: bool = False
    non_finite: list[str] = field(default_factory=list)

    @property
    def first_update(self) -> bool:
        return self.update == 1


POSITION = UpdatePosition()

# loss mode -> fn(worker, mini_batch) run before each mini-batch update; its result is POSITION.prepared
PREPARE: dict[str, Callable[[Any, Any], Any]] = {}


def loss_mode(worker: Any) -> str | None:
    """The policy loss a verl worker trains with: `policy_loss.loss_mode` of the actor config its loss
    function is bound to (verl: `partial(ppo_loss, config=actor_config)`); None when it has none."""
    config = (getattr(getattr(worker, "loss_fn", None), "keywords", None) or {}).get("config")
    policy = None if config is None else getattr(config, "policy_loss", None)
    getter = getattr(policy, "get", None)
    return None if getter is None else getter("loss_mode", None)


def _total(value: Any) -> float:
    """The sum of every value verl holds for one key of one mini-batch: a `Metric` (one rank), a list of
    them (all-gathered over DP ranks), or plain numbers."""
    if isinstance(value, list | tuple):
        return float(sum(_total(v) for v in value))
    values = getattr(value, "values", None)
    if isinstance(values, list):
        return float(sum(float(v) for v in values))
    return float(value)


def fold(metrics: dict[str, Any]) -> dict[str, Any]:
    """One mini-batch's metrics with each `WEIGHTED_SUM`/`WEIGHTED_N` pair replaced by the fraction
    `sum / n` under the metric's name (absent when `n` is 0); every other key unchanged."""
    out = {k: v for k, v in metrics.items() if not k.startswith((WEIGHTED_SUM, WEIGHTED_N))}
    for key, value in metrics.items():
        if key.startswith(WEIGHTED_SUM):
            name = key.removeprefix(WEIGHTED_SUM)
            n = _total(metrics.get(WEIGHTED_N + name, 0.0))
            if n > 0:
                out[name] = _total(value) / n
    return out


def _fold_output(output: Any) -> Any:
    """`train_batch`'s output (a TensorDict on the ranks that return metrics, else None), folded."""
    if output is None:
        return output
    from verl.utils import tensordict_utils as tu

    metrics = tu.get(output, "metrics", default=None)
    if isinstance(metrics, dict) and any(k.startswith(WEIGHTED_SUM) for k in metrics):
        tu.assign_non_tensor(output, metrics=fold(metrics))
    return output


def dp_gather(worker: Any, local: Any) -> list:
    """`local` of every rank of the worker's data-parallel group, in rank order (`[local]` alone
    without a group of more than one rank)."""
    import torch.distributed as dist

    engine = getattr(worker, "engine", None)
    group = None if engine is None else engine.get_data_parallel_group()
    if group is None or not dist.is_initialized() or dist.get_world_size(group) == 1:
        return [local]
    gathered = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, local, group=group)
    return gathered


def agree_finite(worker: Any) -> None:
    """Raise `NonFiniteLoss` on every rank of the worker's DP group when any rank's loss recorded a
    non-finite input in this mini-batch (`POSITION.non_finite`): the rank that found it with its own
    message (its loss already recorded the divergence beside the run), the others naming another rank."""
    local = list(POSITION.non_finite)
    gathered = dp_gather(worker, local)
    problems = [msg for g in gathered for msg in g]
    if problems:
        raise NonFiniteLoss(local[0] if local else f"another data-parallel rank: {problems[0]}")


def wrap(cls: type) -> type:
    """Wrap `cls`'s `load_checkpoint`, `train_mini_batch` and `train_batch` to keep `POSITION` (once)."""
    if getattr(cls, "_fp8rl_update_position", False):
        return cls
    load, mini, batch = cls.load_checkpoint, cls.train_mini_batch, cls.train_batch

    @functools.wraps(load)
    def load_checkpoint(self, local_path, *args, **kwargs):
        m = _STEP_DIR.search(str(local_path))
        if m:
            POSITION.loaded_step, POSITION.step = int(m.group(1)), None
        return load(self, local_path, *args, **kwargs)

    @functools.wraps(mini)
    def train_mini_batch(self, *args, **kwargs):
        POSITION.step = (POSITION.loaded_step if POSITION.step is None else POSITION.step) + 1
        POSITION.update = 0
        return mini(self, *args, **kwargs)

    @functools.wraps(batch)
    def train_batch(self, *args, **kwargs):
        POSITION.update += 1
        POSITION.prepared = None
        prepare = PREPARE.get(loss_mode(self))
        if prepare is not None:
            POSITION.prepared = prepare(self, args[0] if args else kwargs["data"])
        POSITION.non_finite, POSITION.deferring = [], True
        try:
            output = batch(self, *args, **kwargs)
        finally:
            POSITION.deferring = False
        agree_finite(self)
        return _fold_output(output)

    cls.load_checkpoint, cls.train_mini_batch, cls.train_batch = (
        load_checkpoint,
        train_mini_batch,
        train_batch,
    )
    cls._fp8rl_update_position = True
    return cls


def install() -> None:
    """Keep `POSITION` in this process: now if verl's worker module is loaded, else when it is."""
    patch_class(MODULE, CLASS, wrap)
