"""Which training step and which PPO update of it a verl actor worker is in, for fp8rl's calibrated loss.

verl calls a policy loss with tensors and the actor config only. The reference trainer's calibrated
clipping needs two more things per update (fp8rl.engine.update_bounds): the step, whose bf16-run
targets it uses, and whether this is the step's first update (its policy is the one that scored the
old log-probs, so the reference clips nothing). verl 0.9.1's actor runs one step's update as one call of
`TrainingWorker.train_mini_batch`, which calls `train_batch` once per mini-batch (every epoch); a
resumed run's actor first loads `.../global_step_N/actor` through `TrainingWorker.load_checkpoint`.
`install` wraps those three methods to keep `POSITION`: `step` (the last loaded save's step, plus one
per `train_mini_batch`) and `update` (1 for the step's first mini-batch, 2 for the next, ...).

fp8rl.adapters.verl_loss installs it when verl imports it (every worker), patching
`verl.workers.engine_workers` as soon as that module is loaded.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from dataclasses import dataclass

MODULE = "verl.workers.engine_workers"
CLASS = "TrainingWorker"
_STEP_DIR = re.compile(r"global_step_(\d+)")


@dataclass
class UpdatePosition:
    """`step`: this worker's training step (None before its first update); `update`: the mini-batch
    update within it, from 1."""

    step: int | None = None
    update: int = 0
    loaded_step: int = 0

    @property
    def first_update(self) -> bool:
        return self.update == 1


POSITION = UpdatePosition()


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
        return batch(self, *args, **kwargs)

    cls.load_checkpoint, cls.train_mini_batch, cls.train_batch = (
        load_checkpoint,
        train_mini_batch,
        train_batch,
    )
    cls._fp8rl_update_position = True
    return cls


class _Finder:
    """Wraps the worker class right after `MODULE` executes."""

    def find_spec(self, name, path=None, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            wrap(getattr(module, CLASS))

        spec.loader.exec_module = patched
        return spec


def install() -> None:
    """Keep `POSITION` in this process: now if verl's worker module is loaded, else when it is."""
    if MODULE in sys.modules:
        wrap(getattr(sys.modules[MODULE], CLASS))
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
