"""verl's checkpoint retention counts a chain's earlier saves (fp8rl.adapters.verl_retention); the
retention itself, through verl's Megatron checkpoint manager across two jobs, is tested by
test_adapters_verl_ckpt.py's Megatron chain."""

from __future__ import annotations

from pathlib import Path

from fp8rl.adapters import verl_retention


def _save(root: Path, step: int, files: bool = True) -> Path:
    actor = root / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    if files:
        (actor / "ckpt_contents.json").write_text("{}")
    return actor


def test_the_earlier_saves_are_those_below_the_step_that_hold_files_oldest_first(tmp_path):
    saves = {k: _save(tmp_path, k) for k in (10, 2, 7)}
    _save(tmp_path, 5, files=False)  # its actor removed by verl's retention: only data.pt was left
    (tmp_path / "global_step_x").mkdir()
    new = tmp_path / "global_step_11" / "actor"
    assert verl_retention.earlier_saves(str(new), 11) == [str(saves[k]) for k in (2, 7, 10)]
    assert verl_retention.earlier_saves(str(tmp_path / "global_step_7" / "actor"), 7) == [str(saves[2])]


def test_a_managers_first_save_counts_the_saves_on_disk_once(tmp_path):
    class Manager:  # verl's BaseCheckpointManager's list and the save's signature
        def __init__(self):
            self.previous_saved_paths = []
            self.calls = []

        def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
            self.calls.append(list(self.previous_saved_paths))
            self.previous_saved_paths.append(local_path)

    verl_retention.wrap(Manager)
    assert verl_retention.wrap(Manager) is Manager  # once
    earlier = [str(_save(tmp_path, k)) for k in (3, 4)]
    m = Manager()
    m.save_checkpoint(str(tmp_path / "global_step_5" / "actor"), None, global_step=5, max_ckpt_to_keep=2)
    _save(tmp_path, 5)
    m.save_checkpoint(str(tmp_path / "global_step_6" / "actor"), global_step=6, max_ckpt_to_keep=2)
    assert m.calls[0] == earlier  # what verl's ensure_checkpoint_capacity then trims to one
    assert m.calls[1] == [*earlier, str(tmp_path / "global_step_5" / "actor")]  # not counted twice
