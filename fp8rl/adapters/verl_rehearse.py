"""Rehearse a verl training job on a CPU machine: its real job script, run with the real upstream code up
to the first point that needs a GPU (`fp8rl verl rehearse`).

`rehearse_run` writes the run's files as `fp8rl verl train` does (fp8rl.adapters.verl_run.write_run_files:
the same overrides, loss spec and job script), with one change: the script runs every command with this
interpreter on this machine instead of inside the train image. It then runs that script with bash. Its
steps run unchanged: the preflight (the checks of the GPU node and its image skipped, and said so), then
`python -m verl.trainer.main_ppo` with every override the script appends: Hydra composes verl's
`ppo_megatron_trainer`, verl validates it, `ray.init` starts a local Ray with the runtime_env the
overrides build, verl's task runner starts in a Ray worker, brings up TransferQueue, and builds the
trainer class verl dispatches to (`trainer.use_v1`, `trainer.v1.trainer_mode`), which loads the
tokenizer, builds the datasets and dataloaders, and asks Ray for its GPU resource pools. That request
is the first point that needs a GPU: in a rehearsal (`FP8RL_REHEARSAL=1`) fp8rl.adapters.rehearsal_hook,
as the `sitecustomize` on the script's `PYTHONPATH`, makes verl's `create_resource_pool` print `MARKER`
with the trainer class and the GPUs asked for, and stop. A run whose output holds the
marker reached it; anything that stops a job before (a crash in `ray.init`, an override Hydra or verl
refuses, a missing package) fails the rehearsal, with the output's tail.

Ray is told the job node's CPU count (`resources.train.threads`, through `RAY_OVERRIDE_RESOURCES`: what
TransferQueue's actors reserve must fit). Not rehearsed: the multi-node Ray start under Slurm (each
job runs here on one machine, asking for all its nodes' GPUs), and the GPU workers themselves.

Past the marker (`after_marker`), a job that reached it runs on CPU what a CPU can of what follows its
first step, each step with what the job passes (its overrides file, loss spec and job script), each
reported passed or failed (`Step`):

0. `megatron_config`: the Megatron engine's configs each GPU worker builds first, megatron-core's
   `TransformerConfig` through mbridge and its `OptimizerConfig`, with the job's overrides, model
   config and tensor/pipeline parallel sizes, and the reference policy's and vLLM's sizes checked
   against the GPUs and the model, in their pinned sources (fp8rl.adapters.verl_rehearse_engine;
   skipped, and said so, without build/upstream).
1. `dp_update`: verl's own actor update (`TrainingWorker.train_mini_batch` → `ppo_loss` → the job's
   policy loss → `Metric` → the all-gather over the DP group → `Metric.aggregate_dp`) on `DP_RANKS`
   gloo ranks (fp8rl.adapters.verl_rehearse_dp), with the job's clip ratios, loss aggregation, dynamic
   batch size, loss spec (`FP8RL_VERL_LOSS`) and, in a TIS cell, truncated importance weights
   (`rollout_is_weights`, the job's threshold), on GRPO groups of the job's `rollout.n` and
   per-rank mini-batch, sequence lengths and token budget scaled down by `LENGTH_SCALE` (the number of
   sequences per micro-batch stays the paper's). Its first `DP_MINI_BATCHES` mini-batches of a step.
2. `import_metrics`: that update's metrics as verl's v1 trainer logs them (`actor/` prefix,
   `reduce_metrics`) written by verl's `FileLogger` (orjson) and read back by `fp8rl verl
   import-metrics`: every metric fp8rl's loss logged arrives with its value.
3. `tokenizer` (fp8rl.adapters.verl_rehearse_tokenizer): verl's save of the tokenizer (the job's base
   tokenizer loaded and saved again by this machine's transformers, as the train image's transformers 5
   does), exported with the `--tokenizer` the job script passes (fp8rl.adapters.verl_checkpoint),
   loaded by the bfcl image's transformers 4.51.3 from `build/tf4-venv` (skipped, and said so, without
   it).
4. `checkpoint`: the job killed at its time limit and resumed by the next one, through verl's own
   checkpoint and dataloader code with the job's overrides and the job script's `prune_saves`
   (fp8rl.adapters.verl_rehearse_ckpt): every step of the chain equals an uninterrupted run's. Once
   per distinct set of trainer and data settings in a working directory (its `checkpoint_step`).

Without `--base` the model is a stand-in (`stand_in_model`: a character tokenizer with a ChatML template
and a config of the model's family with its attention heads, KV heads and layers); without `--data`, a
few stand-in problems; a calib cell with `calib.reference: run` gets a stand-in bf16 reference run. Ray
runs ~10 processes per job; a job takes ~30-60 s on two cores.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from fp8rl.adapters import rehearsal_hook
from fp8rl.adapters.rehearsal_hook import MARKER, REHEARSAL_ENV
from fp8rl.adapters.rehearsal_stand_ins import (
    HUB_SHAPES,
    model_family,
    stand_in_data,
    stand_in_model,
    stand_in_reference,
    write_verl_file_log,
)
from fp8rl.adapters.verl_launch import OVERRIDES_FILE
from fp8rl.adapters.verl_rehearse_tokenizer import tokenizer_check
from fp8rl.adapters.verl_run import LOSS_FILE, SCRIPT_FILE, verl_paths, write_run_files
from fp8rl.config import ExperimentConfig
from fp8rl.config.runs import RunSpec

MARKER_RE = re.compile(re.escape(MARKER) + r": trainer=(?P<trainer>\S+) gpus=(?P<gpus>\d+)")
SITE_DIR = "rehearsal_site"  # holds rehearsal_hook.py as sitecustomize.py
TIMEOUT_S = 900
TAIL_CHARS = 4000
DP_RANKS = 2  # gloo ranks of the rehearsed actor update (the jobs' DP groups are 4 to 8)
DP_MINI_BATCHES = 2  # of a step's mini-batches
LENGTH_SCALE = 64  # response lengths and the token budget per micro-batch, divided by this


# ---------------------------------------------------------------------------------------- the jobs


def job_types(cfg: ExperimentConfig) -> list[RunSpec]:
    """One run per (algorithm, variant, granularity) (what the overrides, the loss spec and the
    preflight see differently; seeds change values only) and per model (nodes, GPUs, parallelism,
    tokenizer family): the jobs that cover every job script's shape."""
    seen: set[tuple[str, ...]] = set()
    out = []
    for spec in cfg.runs():
        kinds = {
            ("cell", spec.algo, spec.variant, spec.granularity, spec.condition or ""),
            ("model", spec.model),
        }
        if not kinds <= seen:
            seen |= kinds
            out.append(spec)
    return out


@dataclass(frozen=True)
class Step:
    """One step past the marker: its name, whether it `ok`, and what it found (or the error)."""

    name: str
    ok: bool
    detail: str
    skipped: bool = False

    def line(self) -> str:
        how = "skipped" if self.skipped else "passed" if self.ok else "FAILED"
        return f"  after the GPU point, {self.name}: {how} ({self.detail})"


@dataclass(frozen=True)
class Rehearsal:
    """How one job's rehearsal ended: `reached_gpu` (its output holds the marker), the `trainer` class
    and `gpus` the marker names, the exit code, and the log."""

    run_id: str
    reached_gpu: bool
    trainer: str | None
    gpus: int | None
    exit_code: int
    log: Path
    steps: tuple[Step, ...] = ()

    @property
    def ok(self) -> bool:
        """Reached the marker, and every step past it passed."""
        return self.reached_gpu and all(s.ok for s in self.steps)

    def line(self) -> str:
        if self.reached_gpu:
            head = f"{self.run_id}: reached the first GPU point ({self.trainer} asks for {self.gpus} GPUs)"
            return "\n".join([head, *(s.line() for s in self.steps)])
        tail = self.log.read_text(errors="replace")[-TAIL_CHARS:] if self.log.is_file() else ""
        how = "timed out (waiting for Ray resources?)" if self.exit_code == 124 else f"exit {self.exit_code}"
        return f"{self.run_id}: FAILED before its first GPU point ({how}; {self.log}):\n{tail}"


def _script_env(cfg: ExperimentConfig, site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "RAY_ADDRESS"}
    env[REHEARSAL_ENV] = "1"
    paths = [str(site)] + [str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)  # absolute: the script runs in the run directory
    env["RAY_OVERRIDE_RESOURCES"] = json.dumps({"CPU": cfg.resources_for("train").threads})
    return env


def rehearse_run(
    cfg: ExperimentConfig,
    spec: RunSpec,
    work: Path,
    *,
    base: Path | None = None,
    data: Path | None = None,
    extra_overrides: list[str] | tuple[str, ...] = (),
    timeout_s: int = TIMEOUT_S,
    after: bool = True,
) -> Rehearsal:
    """Write the run's files under `work/<run id>/`, run its job script to the first GPU point and,
    when it got there (and with `after`), the steps past it (`after_marker`)."""
    work = Path(work).resolve()
    out = work / spec.run_id.replace("/", "-")
    site = work / SITE_DIR
    site.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(rehearsal_hook.__file__, site / "sitecustomize.py")
    if base is None:
        hf_id = cfg.model(spec.model).hf_id or spec.model
        base = stand_in_model(work / f"stand-in-{spec.model}", model_family(hf_id), HUB_SHAPES.get(hf_id))
    data = data or stand_in_data(work / "stand-in-data")
    reference = stand_in_reference(work / "stand-in-reference") if spec.spec.calib else None
    # the job's caches (HF datasets' parquet cache) in the working directory, not the config's hub
    cfg = cfg.model_copy(update={"hub": cfg.hub.model_copy(update={"home": str(work / "hf_home")})})
    paths = verl_paths(cfg, spec, out, base)
    write_run_files(
        cfg, spec, paths, data=data, reference=reference, extra_overrides=extra_overrides,
        host_python=sys.executable,
    )  # fmt: skip
    log = out / "rehearsal.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            ["bash", str(out / SCRIPT_FILE)], cwd=out, env=_script_env(cfg, site), stdout=fh,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = 124
        finally:
            _kill_group(proc)
    m = MARKER_RE.search(log.read_text(errors="replace"))
    steps = tuple(after_marker(out, base, timeout_s=timeout_s)) if m and after else ()
    return Rehearsal(
        spec.run_id, m is not None, m["trainer"] if m else None, int(m["gpus"]) if m else None, rc, log,
        steps,
    )  # fmt: skip


def _kill_group(proc: subprocess.Popen) -> None:
    """End what the script left running (Ray's processes are in its session)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


# ------------------------------------------------------------------------------ past the GPU point


def after_marker(out: Path, base: Path, *, timeout_s: int = TIMEOUT_S, checkpoint: bool = True) -> list[Step]:
    """The steps past the marker (module docstring) for the run files under `out`; a step that raises
    fails with the error, the others still run. `checkpoint`: with step 4 (minutes on two cores)."""
    from fp8rl.adapters import verl_rehearse_ckpt, verl_rehearse_engine

    overrides = dict(o.split("=", 1) for o in json.loads((out / OVERRIDES_FILE).read_text())["overrides"])
    steps = []
    from fp8rl.adapters.verl_rehearse_megatron import has_megatron_sources

    try:
        if has_megatron_sources():
            steps.append(Step("megatron_config", *verl_rehearse_engine.engine_step(out, base, timeout_s)))
        else:
            steps.append(
                Step("megatron_config", True, "no build/upstream (scripts/upstream_src.sh)", skipped=True)
            )
    except Exception as exc:  # noqa: BLE001  (reported as the step's failure)
        steps.append(Step("megatron_config", False, f"{type(exc).__name__}: {exc}"))
    metrics: dict | None = None
    try:
        step, metrics = dp_update_step(overrides, out / LOSS_FILE, out / "rehearsal_dp", timeout_s)
    except Exception as exc:  # noqa: BLE001  (reported as the step's failure)
        step = Step("dp_update", False, f"{type(exc).__name__}: {exc}")
    steps.append(step)
    for name, fn in (
        ("import_metrics", lambda: import_metrics_step(metrics, out / "rehearsal_import")),
        ("tokenizer", lambda: Step("tokenizer", *tokenizer_check(out, base))),
        ("checkpoint", lambda: Step("checkpoint", *verl_rehearse_ckpt.checkpoint_step(out, base, timeout_s))),
    ):
        if name == "checkpoint" and not checkpoint:
            continue
        try:
            steps.append(fn())
        except Exception as exc:  # noqa: BLE001
            steps.append(Step(name, False, f"{type(exc).__name__}: {exc}"))
    return steps


def _bool(value: str) -> bool:
    return value.strip().lower() == "true"


def dp_case(overrides: dict[str, str]) -> tuple[dict, int]:
    """The case of fp8rl.adapters.verl_rehearse_dp for the job's overrides, and its data-parallel size."""
    actor = "actor_rollout_ref.actor."
    gpus = int(overrides["trainer.nnodes"]) * int(overrides["trainer.n_gpus_per_node"])
    split = 1
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"):
        split *= int(overrides.get(f"{actor}megatron.{key}", 1))
    dp = max(gpus // split, 1)
    n = int(overrides["actor_rollout_ref.rollout.n"])
    prompts_per_mini = int(overrides[f"{actor}ppo_mini_batch_size"])
    per_rank = max(prompts_per_mini // dp, 1)  # prompts of a mini-batch on each DP rank
    dynamic = _bool(overrides.get(f"{actor}use_dynamic_bsz", "false"))
    max_len = max(int(overrides["data.max_response_length"]) // LENGTH_SCALE, 1)
    max_tokens = None
    if dynamic:
        max_tokens = max(int(overrides[f"{actor}ppo_max_token_len_per_gpu"]) // LENGTH_SCALE, max_len + 3)
    micro = None if dynamic else int(overrides.get(f"{actor}ppo_micro_batch_size_per_gpu", 1))
    case = {
        "loss": overrides.get(f"{actor}policy_loss.loss_mode", "vanilla"),
        "mini": per_rank * n,
        "micro": micro,
        "actor": {
            "clip_ratio_low": float(overrides[f"{actor}clip_ratio_low"]),
            "clip_ratio_high": float(overrides[f"{actor}clip_ratio_high"]),
            "clip_ratio_c": float(overrides.get(f"{actor}clip_ratio_c", 3.0)),
            "loss_agg_mode": overrides.get(f"{actor}loss_agg_mode", "token-mean"),
            "use_kl_loss": _bool(overrides.get(f"{actor}use_kl_loss", "false")),
            "use_dynamic_bsz": dynamic,
            "max_token_len_per_gpu": max_tokens,
        },
        "groups": {"prompts": per_rank * DP_MINI_BATCHES, "n": n, "max_len": max_len, "seed": 0},
    }
    if overrides.get("algorithm.rollout_correction.rollout_is") == "token":  # TIS: the loss gets weights
        case["groups"]["rollout_is_threshold"] = float(
            overrides["algorithm.rollout_correction.rollout_is_threshold"]
        )
    return case, dp


def dp_update_step(
    overrides: dict[str, str], loss_spec: Path, work: Path, timeout_s: int = TIMEOUT_S
) -> tuple[Step, dict | None]:
    """Step 1: verl's actor update over `DP_RANKS` gloo ranks (module docstring); the gathered metrics."""
    from fp8rl.adapters.verl_rehearse_dp import run_ranks

    case, dp = dp_case(overrides)
    results = run_ranks(case, work, DP_RANKS, loss_spec, timeout_s=timeout_s)
    errors = [f"rank {r}: {res['error']}" for r, res in enumerate(results) if "error" in res]
    if errors:
        tail = results[[("error" in r) for r in results].index(True)].get("traceback", "")[-TAIL_CHARS:]
        return Step("dp_update", False, "; ".join(errors) + "\n" + tail), None
    metrics = [{k: v for k, v in r["metrics"].items() if not k.startswith("perf/")} for r in results]
    if any(m != metrics[0] for m in metrics):
        return Step("dp_update", False, "the ranks returned different metrics"), None
    logged = sorted(k for k in metrics[0] if "/" in k and k.split("/")[0] in ("clip", "ratio", "calib"))
    what = (
        f"{case['loss']} on {DP_RANKS} gloo ranks (the job's DP: {dp}), {DP_MINI_BATCHES} mini-batches of "
        f"{case['mini']} sequences per rank, groups of {case['groups']['n']}, up to "
        f"{case['groups']['max_len']} tokens"
        + (", TIS weights" if case["groups"].get("rollout_is_threshold") else "")
        + f", {len(metrics[0])} metrics gathered ({', '.join(logged[:4])}, ...)"
    )
    return Step("dp_update", True, what), results[0]["metrics"]


def import_metrics_step(metrics: dict | None, work: Path) -> Step:
    """Step 2: the update's metrics through verl's `FileLogger` and `fp8rl verl import-metrics`."""
    if metrics is None:
        return Step("import_metrics", False, "no metrics: the DP update failed")
    from verl.utils.metric import reduce_metrics
    from verl.utils.py_functional import rename_dict

    from fp8rl.adapters.verl_metrics import PASSTHROUGH, import_log

    work.mkdir(parents=True, exist_ok=True)
    log, out = work / "verl_file_logger.jsonl", work / "metrics.jsonl"
    step_metrics = reduce_metrics(rename_dict(dict(metrics), "actor/"))
    write_verl_file_log(log, {1: step_metrics}, project="fp8rl-rehearsal")
    try:  # what `fp8rl verl import-metrics` runs (fp8rl.commands.verl.cmd_import_metrics)
        import_log(log, out)
    except ValueError as exc:
        return Step("import_metrics", False, f"fp8rl verl import-metrics refused the log: {exc}")
    if not out.is_file():
        return Step("import_metrics", False, "fp8rl verl import-metrics wrote no metrics.jsonl")
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    if len(rows) != 1:
        return Step("import_metrics", False, f"{len(rows)} rows imported from one logged step")
    want = {k.removeprefix("actor/"): float(v) for k, v in step_metrics.items()
            if k.removeprefix("actor/") in PASSTHROUGH}  # fmt: skip
    lost = sorted(k for k in want if k not in rows[0])
    changed = sorted(
        k for k in want if k in rows[0] and abs(rows[0][k] - want[k]) > 1e-6 * max(1.0, abs(want[k]))
    )
    if not want or lost or changed:
        why = "no metric of fp8rl's loss logged" if not want else f"lost {lost}, changed {changed}"
        return Step("import_metrics", False, why)
    return Step(
        "import_metrics", True, f"{len(want)} of fp8rl's loss metrics read back from verl's FileLogger"
    )
