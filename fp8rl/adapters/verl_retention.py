"""verl's checkpoint retention across the jobs of a run's chain, not only within one job.

verl 0.9.1's Megatron checkpoint manager (`verl.utils.checkpoint.megatron_checkpoint_manager`) keeps
`max_ckpt_to_keep` saves through `previous_saved_paths`, a list of the saves this manager object wrote:
before each save it deletes down to `max_ckpt_to_keep - 1` of them (`ensure_checkpoint_capacity`), after
it down to `max_ckpt_to_keep` (`register_checkpoint`). A resumed job builds a new manager with an empty
list, so the saves the job script kept from the jobs before (the one it resumes from and the one before
it, fp8rl.adapters.verl_launch `prune_saves`) stay on disk beside the saves the job makes until it
ends: with `max_actor_ckpt_to_keep: 2`, up to four saves of the run at once (two carried over, one kept,
one being written) where the storage plan counts two. `wrap` makes the manager's first save of a job
count the saves already on disk: `previous_saved_paths` gets every earlier `global_step_K/<role>`
(K below the step being saved, holding files) first, oldest first, so verl's own retention deletes the
carried-over saves as it would its own, and at most two complete saves exist, one while the next is
written, as in a single job.

Installed in every verl process that imports fp8rl's loss module (fp8rl.adapters.verl_loss), the
actor's workers included.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from fp8rl.adapters.import_patch import patch_class

MODULE = "verl.utils.checkpoint.megatron_checkpoint_manager"
CLASS = "MegatronCheckpointManager"
STEP_PREFIX = "global_step_"


def earlier_saves(local_path: str, global_step: int) -> list[str]:
    """The `<root>/global_step_K/<role>` folders holding files for K < `global_step`, oldest first, where
    `local_path` is `<root>/global_step_<global_step>/<role>` (verl's trainer lays saves out so)."""
    path = Path(local_path)
    root, role = path.parent.parent, path.name
    found = []
    for step_dir in root.glob(f"{STEP_PREFIX}*"):
        step = step_dir.name.removeprefix(STEP_PREFIX)
        save = step_dir / role
        if step.isdigit() and int(step) < global_step and save.is_dir() and any(save.iterdir()):
            found.append((int(step), str(save)))
    return [save for _, save in sorted(found)]


def wrap(cls: type) -> type:
    """Wrap `cls.save_checkpoint` so the first save of this manager object counts the earlier saves on
    disk (module docstring); once per class."""
    if getattr(cls, "_fp8rl_retention", False):
        return cls
    save = cls.save_checkpoint

    @functools.wraps(save)
    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None, **kwargs):
        if not getattr(self, "_fp8rl_earlier_saves_counted", False):
            own = {os.path.abspath(p) for p in self.previous_saved_paths}
            earlier = [
                p for p in earlier_saves(local_path, int(global_step)) if os.path.abspath(p) not in own
            ]
            self.previous_saved_paths = earlier + list(self.previous_saved_paths)
            self._fp8rl_earlier_saves_counted = True
        return save(self, local_path, hdfs_path, global_step=global_step, max_ckpt_to_keep=max_ckpt_to_keep,
                    **kwargs)  # fmt: skip

    cls.save_checkpoint = save_checkpoint
    cls._fp8rl_retention = True
    return cls


def install() -> None:
    """Count a chain's earlier saves in this process: now if verl's Megatron checkpoint manager is
    loaded, else when it is."""
    patch_class(MODULE, CLASS, wrap)
