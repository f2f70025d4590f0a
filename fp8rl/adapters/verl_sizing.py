"""How long, how big and how often: the verl training jobs sized from the model and the schedule.

A paper run is longer than any Slurm job (500 steps of ~1 h), so it is a chain of jobs of
`resources.train.runtime` minutes, each resuming from the last verl checkpoint. Three things make that
chain finish:

- **A checkpoint on time.** verl 0.9.1's trainer saves a checkpoint after a step when
  `MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP` (an epoch time) is closer than its slowest step so
  far + 60 s + `trainer.esi_redundant_time` (`verl.utils.checkpoint.checkpoint_manager.should_save_ckpt_esi`).
  The job script sets it to the Slurm job's end (fp8rl.adapters.verl_launch) and the overrides set the
  margin to the time a checkpoint of this model takes to write (`esi_margin_s`), so every job ends with a
  checkpoint whatever `schedule.checkpoint_every` is; `checkpoint_every` is the fallback for a job that
  dies early (node failure).
- **Enough attempts.** `attempts_needed`: the steps times the step time over what one job trains (its
  runtime less start-up and the one step a checkpoint may cost); `resources.train.retries` must allow
  them (checked by `verl_problems` when the model states `step_minutes`).
- **Storage.** `checkpoint_bytes`: a resumable checkpoint holds the bf16 Hugging Face weights (mbridge)
  plus the distributed optimizer (fp32 master weights and two Adam moments: fp32, or bf16 in the fp8
  cells); verl keeps `MAX_CKPTS` of them while a run trains, and the job script removes them once the
  final Hugging Face checkpoint is exported.
"""

from __future__ import annotations

import math

from fp8rl.config import ExperimentConfig, ModelConfig

STARTUP_MINUTES = 20  # Ray start, model load and resume, vLLM start (estimate, 8B-32B)
CKPT_WRITE_GBPS = 1.0  # sustained write per run to the shared filesystem, GB/s (a conservative Lustre share)
ESI_FIXED_MARGIN_S = 600  # beyond the checkpoint write: the export and slack
MAX_CKPTS = 2  # resume point + one spare (trainer.max_actor_ckpt_to_keep)


def _params(model: ModelConfig) -> float:
    from fp8rl.adapters.verl_overrides import params_billions

    return params_billions(model) * 1e9


def checkpoint_bytes(model: ModelConfig, *, fp8_moments: bool) -> float:
    """Bytes of one resumable verl checkpoint: bf16 HF weights + fp32 master + two Adam moments."""
    moments = 2 * (2 if fp8_moments else 4)
    return _params(model) * (2 + 4 + moments)


def hf_bytes(model: ModelConfig) -> float:
    """Bytes of the exported bf16 Hugging Face checkpoint (`{run}/checkpoint/`)."""
    return _params(model) * 2


def esi_margin_s(model: ModelConfig) -> int:
    """verl's `trainer.esi_redundant_time`: seconds to write the largest checkpoint of this model, doubled,
    plus a fixed margin for the export."""
    write = checkpoint_bytes(model, fp8_moments=False) / (CKPT_WRITE_GBPS * 1e9)
    return int(ESI_FIXED_MARGIN_S + 2 * write)


def usable_minutes(cfg: ExperimentConfig, model: ModelConfig) -> float:
    """Training minutes one job of `resources.train.runtime` yields: less start-up, the final checkpoint
    margin and the one step verl's on-time checkpoint may leave unfinished."""
    runtime = cfg.resources_for("train").runtime
    return runtime - STARTUP_MINUTES - esi_margin_s(model) / 60 - (model.step_minutes or 0)


def attempts_needed(cfg: ExperimentConfig, model: ModelConfig) -> int | None:
    """Jobs one run of `model` needs (None when the model states no `step_minutes`)."""
    if model.step_minutes is None:
        return None
    usable = usable_minutes(cfg, model)
    if usable <= 0:
        return math.inf  # type: ignore[return-value]
    return math.ceil(cfg.schedule.steps * model.step_minutes / usable)


def sizing_problems(cfg: ExperimentConfig) -> list[tuple[tuple, str]]:
    """Train jobs that cannot finish: a runtime that reaches no checkpoint, or too few retries (for the
    model that needs the most jobs)."""
    runtime, retries = cfg.resources_for("train").runtime, cfg.resources_for("train").retries
    need = {n: attempts_needed(cfg, cfg.model(n)) for n in cfg.matrix.models}
    need = {n: k for n, k in need.items() if k is not None}
    if not need:
        return []
    name = max(need, key=need.get)
    model = cfg.model(name)
    if need[name] == math.inf:
        return [(("resources", "train", "runtime"), (
            f"{runtime} minutes do not fit start-up ({STARTUP_MINUTES}), one step of {name} "
            f"({model.step_minutes:g}) and its checkpoint ({esi_margin_s(model) / 60:.0f}): no job would "
            "reach a checkpoint"
        ))]  # fmt: skip
    if retries + 1 < need[name]:
        return [(("resources", "train", "retries"), (
            f"{retries} allow {retries + 1} jobs, but a {name} run needs {need[name]} "
            f"({cfg.schedule.steps} steps x {model.step_minutes:g} min over "
            f"{usable_minutes(cfg, model):.0f} usable minutes per job); set retries >= {need[name] - 1}"
        ))]  # fmt: skip
    return []
