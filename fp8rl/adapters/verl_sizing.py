"""How long, how big and how often: the verl training jobs sized from the model and the schedule.

A paper run is longer than any Slurm job (500 steps of ~1 h), so it is a chain of jobs of
`resources.train.runtime` minutes, each resuming from the last verl checkpoint. Three things make that
chain finish:

- **A save cadence that fits the job.** verl 0.9.1 dispatches to its v1 trainer (`trainer.use_v1: true`,
  `trainer.v1.trainer_mode: sync`: `verl.trainer.ppo.v1.trainer_sync.PPOTrainerSync`), whose loop saves
  after a step only when `global_steps % trainer.save_freq == 0` or on the last step; the deadline save
  (`should_save_ckpt_esi`, `MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP`) is called only by the legacy
  trainer. A job killed at its time limit keeps the steps up to its last save, so `save_every` derives
  `trainer.save_freq` from the model's `step_minutes` and its checkpoint write time: the cadence that
  keeps the most steps per job (`steps_per_job`), the shortest of those (a job that runs slower than
  `step_minutes` then loses the fewest), at most `schedule.checkpoint_every`.
- **Enough attempts.** `attempts_needed`: the steps over what one job keeps; `resources.train.retries` must
  allow them (checked by `sizing_problems` when the model states `step_minutes`). `step_minutes` is an
  estimate; after every job `fp8rl verl train` re-sizes the chain from the step times verl measured
  (`measured_step_minutes`: the median of `timing_s/step` over the run's attempts) at the job's real
  save cadence and says, on stderr and in the Slurm log, when `retries` no longer cover it
  (`chain_problem`), while the run has attempts left to raise them.
- **Ray's CPUs.** Before its first step verl reserves Ray CPUs on the head node: its task runner (1) and
  TransferQueue's controller and storage units (1 + 8), and 3 per GPU for its worker pool
  (`ResourcePoolManager`'s bundles); a job whose `resources.train.threads` is below `ray_cpus_needed`
  waits for them until its time limit (the rehearsal shows it: fp8rl.adapters.verl_rehearse).
- **Storage.** `checkpoint_bytes`: a resumable checkpoint holds the bf16 Hugging Face weights (mbridge)
  plus the distributed optimizer (fp32 master weights and two Adam moments: fp32, or bf16 in the fp8
  cells); verl keeps `MAX_CKPTS` of them while a run trains, and the job script removes them once the
  final Hugging Face checkpoint is exported.

The job script still tells verl the job's end and the overrides set `trainer.esi_redundant_time`
(`esi_margin_s`): only the legacy trainer (`trainer.use_v1=false`) reads them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

from fp8rl.adapters.verl_model import params_billions
from fp8rl.config import ExperimentConfig, ModelConfig

STARTUP_MINUTES = 20  # Ray start, model load and resume, vLLM start (estimate, 8B-32B)
CKPT_WRITE_GBPS = 1.0  # sustained write per run to the shared filesystem, GB/s (a conservative Lustre share)
ESI_FIXED_MARGIN_S = 600  # beyond the checkpoint write: the export and slack
STEP_TIMING = "timing_s/step"  # verl's wall time of one training step (the v1 trainer's `step` timer)
MAX_CKPTS = 2  # resume point + one spare (trainer.max_actor_ckpt_to_keep)
RAY_CPUS_FIXED = 10  # verl's task runner, TransferQueue's controller and its 8 storage units (1 CPU each)
RAY_CPUS_PER_GPU = 3  # verl's ResourcePoolManager: a bundle of {"CPU": 3, "GPU": 1} per GPU


def _params(model: ModelConfig) -> float:
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


def write_minutes(model: ModelConfig) -> float:
    """Minutes one save of this model takes (the largest checkpoint, fp32 moments, at `CKPT_WRITE_GBPS`)."""
    return checkpoint_bytes(model, fp8_moments=False) / (CKPT_WRITE_GBPS * 1e9) / 60


def steps_per_job(cfg: ExperimentConfig, model: ModelConfig, every: int) -> int:
    """Steps one job of `resources.train.runtime` keeps when verl saves every `every` steps: after the
    start-up, whole cycles of `every` steps and one save; a cycle the time limit cuts is lost."""
    train = cfg.resources_for("train").runtime - STARTUP_MINUTES
    if model.step_minutes is None or train <= 0:
        return 0
    return math.floor(train / (every * model.step_minutes + write_minutes(model))) * every


def save_every(cfg: ExperimentConfig, model: ModelConfig) -> int:
    """verl's `trainer.save_freq` for this model: the shortest cadence, up to `schedule.checkpoint_every`,
    that keeps the most steps per job (`steps_per_job`); `checkpoint_every` without `step_minutes`."""
    most = max(1, cfg.schedule.checkpoint_every)
    if model.step_minutes is None:
        return most
    kept = {k: steps_per_job(cfg, model, k) for k in range(1, most + 1)}
    return min(kept, key=lambda k: (-kept[k], k))


def attempts_needed(cfg: ExperimentConfig, model: ModelConfig) -> int | None:
    """Jobs one run of `model` needs at its `save_every` cadence (None when the model states no
    `step_minutes`; infinite when no job keeps a step)."""
    if model.step_minutes is None:
        return None
    kept = steps_per_job(cfg, model, save_every(cfg, model))
    if kept <= 0:
        return math.inf  # type: ignore[return-value]
    return math.ceil(cfg.schedule.steps / kept)


def measured_step_minutes(raw: Iterable[dict]) -> float | None:
    """The median of verl's measured step times (`STEP_TIMING`, seconds) in `raw` (verl's file-logger
    rows, `{"step", "data"}`), in minutes; None without one."""
    seconds = []
    for row in raw:
        value = (row.get("data") or {}).get(STEP_TIMING) if isinstance(row, dict) else None
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value > 0
        ):
            seconds.append(float(value))
    return statistics.median(seconds) / 60 if seconds else None


def chain_problem(cfg: ExperimentConfig, model: ModelConfig, step_minutes: float) -> str | None:
    """What to change when steps of `step_minutes` (measured) make a run of `model` need more jobs than
    `resources.train.retries` allow, at the cadence the jobs save with (`save_every` of the configured
    `step_minutes`); None when they still suffice."""
    retries = cfg.resources_for("train").retries
    every = save_every(cfg, model)
    kept = steps_per_job(cfg, model.model_copy(update={"step_minutes": step_minutes}), every)
    need = math.inf if kept <= 0 else math.ceil(cfg.schedule.steps / kept)
    if need <= retries + 1:
        return None
    planned = "" if model.step_minutes is None else f" (planned {model.step_minutes:g})"
    if need == math.inf:
        return (
            f"measured {step_minutes:.1f}-minute steps{planned}: a job of {cfg.resources_for('train').runtime} "
            f"minutes keeps no save every {every} steps; raise resources.train.runtime"
        )
    return (
        f"measured {step_minutes:.1f}-minute steps{planned}: {kept} steps kept per job, so a {model.name} run "
        f"needs {need} jobs for {cfg.schedule.steps} steps, but resources.train.retries {retries} allow "
        f"{retries + 1}; set retries >= {need - 1} (or models[].step_minutes: {math.ceil(step_minutes)}) "
        "before its attempts run out"
    )


def ray_cpus_needed(model: ModelConfig) -> int:
    """Ray CPUs verl reserves on a job's head node before its first step (module docstring)."""
    return RAY_CPUS_FIXED + RAY_CPUS_PER_GPU * model.gpus_per_node


def sizing_problems(cfg: ExperimentConfig) -> list[tuple[tuple, str]]:
    """Train jobs that cannot finish: fewer CPUs than verl reserves, a runtime that reaches no
    checkpoint, or too few retries (for the model that needs the most jobs)."""
    runtime, retries = cfg.resources_for("train").runtime, cfg.resources_for("train").retries
    threads = cfg.resources_for("train").threads
    cpus = {n: ray_cpus_needed(cfg.model(n)) for n in cfg.matrix.models}
    short = [n for n in cfg.matrix.models if threads < cpus[n]]
    if short:
        return [(("resources", "train", "threads"), (
            f"{threads} CPUs per job, but verl reserves {cpus[short[0]]} for {short[0]} before its first step "
            f"({RAY_CPUS_FIXED} for its task runner and TransferQueue, {RAY_CPUS_PER_GPU} per GPU): the job "
            f"would wait until its time limit; set threads >= {max(cpus.values())}"
        ))]  # fmt: skip
    need = {n: attempts_needed(cfg, cfg.model(n)) for n in cfg.matrix.models}
    need = {n: k for n, k in need.items() if k is not None}
    if not need:
        return []
    name = max(need, key=need.get)
    model = cfg.model(name)
    if need[name] == math.inf:
        return [(("resources", "train", "runtime"), (
            f"{runtime} minutes do not fit start-up ({STARTUP_MINUTES}), one step of {name} "
            f"({model.step_minutes:g}) and its checkpoint ({write_minutes(model):.0f}): no job would "
            "reach a checkpoint"
        ))]  # fmt: skip
    if retries + 1 < need[name]:
        every = save_every(cfg, model)
        return [(("resources", "train", "retries"), (
            f"{retries} allow {retries + 1} jobs, but a {name} run needs {need[name]} "
            f"({cfg.schedule.steps} steps, {steps_per_job(cfg, model, every)} kept per job of {runtime} "
            f"minutes: {model.step_minutes:g}-minute steps saved every {every}); set retries >= {need[name] - 1}"
        ))]  # fmt: skip
    return []
