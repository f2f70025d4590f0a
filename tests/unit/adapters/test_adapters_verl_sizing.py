"""The job chain of a paper run against the trainer class verl 0.9.1 dispatches to: its own `fit` loop
decides when a checkpoint is saved, a clock of `step_minutes` per step and the model's write time per
save decides when Slurm kills the job; each job resumes at the last save. The chain must finish within
`resources.train.retries` and take exactly the jobs fp8rl.adapters.verl_sizing plans.

Runs in the verl environment (test_adapters_verl_env.py)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from fp8rl.adapters.verl_launch import DEADLINE_ENV
from fp8rl.adapters.verl_overrides import CONFIG_NAME, VerlPaths, verl_overrides
from fp8rl.adapters.verl_sizing import STARTUP_MINUTES, attempts_needed, write_minutes
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import load_config

ROOT = Path(__file__).resolve().parents[3]
PATHS = VerlPaths("/models/base", "/run/verl_data/train.parquet", "/run/verl_data/test.parquet", "/run")


class Killed(Exception):
    """Slurm's time limit."""


class _Null:
    """verl's loggers, TransferQueue and progress bar: called, and every method, do nothing."""

    def __call__(self, *args, **kwargs):
        return self

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def _trainer_class(config):
    """The class verl's main_ppo runs for this config (main_ppo.main, TaskRunnerV1.run)."""
    from verl.trainer.ppo.v1 import get_trainer_cls

    assert config.trainer.use_v1  # else main_ppo runs the legacy TaskRunner
    return get_trainer_cls(config.trainer.v1.trainer_mode)


def _job(cls, config, resume_at: int, minutes: float, step_min: float, save_min: float) -> int:
    """One Slurm job: the trainer's real `fit` from the save at `resume_at`, killed when `minutes` run
    out; returns the step of its last save."""
    t = cls.__new__(cls)
    t.config = config
    t.global_steps = resume_at
    t.total_training_steps = config.trainer.total_training_steps
    t.steps_per_epoch = 10**9
    clock = {"now": 0.0, "saved": resume_at}

    def step(metrics, timing_raw):
        if clock["now"] + step_min > minutes:
            raise Killed
        clock["now"] += step_min
        return SimpleNamespace(keys=[], partition_id="train")

    def save():
        if clock["now"] + save_min > minutes:
            raise Killed
        clock["now"] += save_min
        clock["saved"] = t.global_steps

    t.step, t._save_checkpoint = step, save
    for hook in ("on_train_begin", "on_train_end", "on_step_begin", "on_step_end", "_reissue_inflight_prompts",
                 "_compute_metrics", "_shutdown_dump_executor"):  # fmt: skip
        setattr(t, hook, lambda *a, **k: None)
    t._consume_sync_metrics = lambda: {}
    with contextlib.suppress(Killed):
        t.fit(agent_loop_manager=None)
    return clock["saved"]


@pytest.mark.parametrize("model", ["qwen3-8b", "qwen2.5-32b"])
def test_the_job_chain_finishes_under_the_trainer_verl_dispatches_to(verl_site, monkeypatch, model):
    import verl
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.v1 import trainer_base

    for name in ("Tracking", "ValidationGenerationsLogger", "DapoFilteredRewardTableLogger", "SkipManager"):
        monkeypatch.setattr(trainer_base, name, _Null())
    monkeypatch.setattr(trainer_base, "tq", _Null())
    monkeypatch.setattr(trainer_base, "tqdm", _Null())
    # the job's end is now: a trainer that saved before its deadline would save after every step
    monkeypatch.setenv(DEADLINE_ENV, "0")
    os.environ.pop("VERL_FILE_LOGGER_PATH", None)

    cfg = load_config(ROOT / "config" / "paper.yaml")
    m = cfg.model(model)
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(
            CONFIG_NAME, overrides=verl_overrides(cfg, RunSpec("grpo", model, "fp8", "blockwise", 0), PATHS)
        )
    cls = _trainer_class(config)
    assert cls.__name__ == "PPOTrainerSync"
    minutes = cfg.resources_for("train").runtime - STARTUP_MINUTES
    saved, jobs = 0, 0
    while saved < cfg.schedule.steps and jobs <= cfg.resources_for("train").retries:
        saved = _job(cls, config, saved, minutes, m.step_minutes, write_minutes(m))
        jobs += 1
    assert saved == cfg.schedule.steps, f"{jobs} jobs reach step {saved} of {cfg.schedule.steps}"
    assert jobs == attempts_needed(cfg, m) <= cfg.resources_for("train").retries + 1
