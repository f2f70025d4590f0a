"""One matrix cell of the typed config -> verl's Hydra overrides for `ppo_megatron_trainer`.

`verl_overrides(cfg, spec, paths)` returns the `key=value` strings that `python -m verl.trainer.main_ppo
--config-name ppo_megatron_trainer` takes: model and parallelism, GRPO vs DAPO (clip bounds, dual clip,
dynamic sampling, overlong buffer, loss aggregation), FP8 rollout (vLLM `quantization=fp8`), FP8
training through Megatron / Transformer Engine with the granularity's recipe, TIS through verl's rollout
correction, and the fp8rl policy losses (`fp8rl_clip`, `calibrated_clip`, `fp8rl_icepop_adaptive`; see
`verl_loss` and `verl_icepop`).

Every setting of a run comes from its `ResolvedRun` (`resolve_run`): the FP8 settings of its condition
(the tier's `fp8` section with a study matrix condition's overrides), never the tier's section alone.

What verl cannot run is refused before any override is built (`check_verl_support`,
fp8rl.adapters.verl_support); the Megatron FP8 recipe of a granularity is fp8rl.adapters.verl_fp8's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from fp8rl.adapters.verl_corrections import (
    correction_loss_spec,
    correction_overrides,
    policy_loss_mode,
    precision_overrides,
)
from fp8rl.adapters.verl_fp8 import fp8_transformer_overrides
from fp8rl.adapters.verl_model import parallelism
from fp8rl.adapters.verl_sizing import MAX_CKPTS, esi_margin_s, save_every
from fp8rl.adapters.verl_support import check_verl_support
from fp8rl.config import (
    DAPOConfig,
    ExperimentConfig,
    ResolvedRun,
    RunSpec,
    resolve_run,
)
from fp8rl.tracking import MLFLOW_DIR

LOSS_MODULE = "fp8rl.adapters.verl_loss"
LOSS_SPEC_ENV = "FP8RL_VERL_LOSS"
CONFIG_NAME = "ppo_megatron_trainer"
# The environment of every Ray worker (verl's main_ppo passes ray_kwargs.ray_init to ray.init)
RAY_ENV_VARS = "+ray_kwargs.ray_init.runtime_env.env_vars"
MAX_PROMPT_LENGTH = 2048
VANILLA_MBRIDGE = True  # mbridge (verl's `mcore` extra) instead of Megatron-Bridge (its `megatron` extra)
# Megatron's attention backend. verl 0.9.1 defaults to `flash`, for which megatron-core sets
# NVTE_FUSED_ATTN=0 / NVTE_UNFUSED_ATTN=0 and Transformer Engine then needs the flash-attn package, which
# the train image does not hold: every run would stop at its first forward ("No dot product attention
# backend is available"). `fused` is TE's cuDNN attention (cuDNN is in the image's lock).
ATTENTION_BACKEND = "fused"
# Activation recompute: with dynamic batching a micro-batch packs 2 x (prompt + response) tokens per GPU
# (~45k), whose activations (~110 GB for 8B at TP 2) do not fit without it. Full recompute of every layer
# keeps one layer's activations per micro-batch (about a third more compute in the backward).
RECOMPUTE = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}

# fp8rl kl_type -> verl kl_loss_type.
VERL_KL_LOSS_TYPES = {"k1": "kl", "k3": "low_var_kl"}
# fp8rl task name -> verl `data_source`, which selects verl's rule-based scorer.
DATA_SOURCES = {"dapo-math-17k": "math_dapo", "gsm8k": "openai/gsm8k", "math": "lighteval/MATH"}
ROLLOUT_GPU_MEMORY = 0.5  # vLLM's share of each GPU while it generates (verl's default, said explicitly)


@dataclass(frozen=True)
class VerlPaths:
    """Where one run reads and writes: the base model, verl's parquet splits, the run directory."""

    model: str
    train_files: str
    val_files: str
    out: str


def loss_spec(
    cfg: ExperimentConfig,
    spec: RunSpec | ResolvedRun,
    *,
    targets: dict[int, tuple[float | None, float | None]] | None = None,
) -> dict:
    """What the verl workers' fp8rl loss needs beyond verl's own actor config (written as JSON and named
    by the `FP8RL_VERL_LOSS` environment variable): dual clip, and the calibration options with, for
    `calib.reference: run`, the bf16 run's per-step `targets` (`{step: [q, q_high]}`) and the updates per
    step (the reference trainer's first-update correction, fp8rl.engine.update_bounds.step_targets)."""
    run = resolve_run(cfg, spec)
    out: dict = {"run_id": run.run_id, "clip_c": run.algo.clip_c, "calib": None}
    if run.variant.calib:
        out["calib"] = {
            **run.calib.model_dump(mode="json", exclude={"sample_frac"}),
            "targets": None if targets is None else {str(k): list(v) for k, v in sorted(targets.items())},
            "updates_per_step": cfg.schedule.ppo_epochs * cfg.schedule.mini_batches,
        }
    return out | correction_loss_spec(cfg, run.variant)


def _q(value: object) -> str:
    """A Hydra override value: plain when safe, else single-quoted."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_q(v) for v in value) + "]"
    if isinstance(value, int | float):
        return repr(value)
    s = str(value)
    if re.fullmatch(r"[A-Za-z0-9_./:@+-]+", s):
        return s
    return _q_str(s)


def _q_str(value: object) -> str:
    """A Hydra override value that stays the string it is: single-quoted whatever it reads as (a bare
    `123` or `true` would be an int or a bool), with every `${` escaped, since Hydra resolves
    interpolations inside quoted strings too (`${oc.env:HF_TOKEN}` in a tracking URI would put the secret
    into verl's printed config). Two layers read the value: OmegaConf takes `\\${` as a literal `${`, the
    backslashes before it escaping each other; Hydra's quoted string takes backslashes before a quote or
    at its end as escaping each other, and every other backslash as itself."""
    s = re.sub(r"(\\*)\$\{", lambda m: 2 * m.group(1) + "\\${", str(value))
    return "'" + re.sub(r"(\\*)('|\Z)", lambda m: 2 * m.group(1) + ("\\'" if m.group(2) else ""), s) + "'"


# verl's live logger writes its TensorBoard events here, under verl's metric names (`{run}/tb/` holds
# fp8rl's names, written by the import when verl has finished).
VERL_TENSORBOARD_DIR = "verl_tb"


def verl_loggers(cfg: ExperimentConfig) -> list[str]:
    """verl's `trainer.logger`: the console and the file logger fp8rl imports, plus the trackers the
    config's `tracking:` section turns on (verl's own tensorboard, wandb and mlflow backends)."""
    t = cfg.tracking
    extra = [name for name, on in (("tensorboard", t.tensorboard), ("wandb", t.wandb.enabled),
                                   ("mlflow", t.mlflow.enabled)) if on]  # fmt: skip
    return ["console", "file", *extra]


def verl_project_name(cfg: ExperimentConfig) -> str:
    """verl's `trainer.project_name`: its W&B logger's project and its MLflow logger's experiment (one
    name for both): `tracking.wandb.project` when W&B is on, else `tracking.mlflow.experiment` when MLflow
    is, else `fp8rl`. With both on under two names, MLflow gets the W&B project's (`deviations`)."""
    t = cfg.tracking
    if t.wandb.enabled:
        return t.wandb.project
    return t.mlflow.experiment if t.mlflow.enabled else "fp8rl"


def verl_tracking_env(cfg: ExperimentConfig, out: str) -> dict[str, str]:
    """The environment verl's loggers read (TENSORBOARD_DIR, WANDB_MODE/WANDB_DIR,
    MLFLOW_TRACKING_URI), passed to its Ray workers; paths inside the run directory `out`."""
    t, env = cfg.tracking, {}
    if t.tensorboard:
        env["TENSORBOARD_DIR"] = f"{out}/{VERL_TENSORBOARD_DIR}"
    if t.wandb.enabled:
        env["WANDB_MODE"], env["WANDB_DIR"] = t.wandb.mode, out
        if t.wandb.entity:
            env["WANDB_ENTITY"] = t.wandb.entity
    if t.mlflow.enabled:
        uri = t.mlflow.tracking_uri or (Path(cfg.results_dir).resolve() / cfg.tier / MLFLOW_DIR).as_uri()
        env["MLFLOW_TRACKING_URI"] = uri
        if uri.startswith("file:"):
            env["MLFLOW_ALLOW_FILE_STORE"] = "true"
    return env


def verl_overrides(cfg: ExperimentConfig, spec: RunSpec | ResolvedRun, paths: VerlPaths) -> list[str]:
    """Hydra overrides of verl's `ppo_megatron_trainer` config for one matrix cell."""
    check_verl_support(cfg, spec)
    run = resolve_run(cfg, spec)
    spec, model, algo, variant, fp8 = run.spec, run.model, run.algo, run.variant, run.fp8
    sched = cfg.schedule
    par = parallelism(model)
    A = "actor_rollout_ref.actor"
    R = "actor_rollout_ref.rollout"
    max_len = MAX_PROMPT_LENGTH + sched.max_new_tokens
    ov: dict[str, object] = {
        # model, data, schedule
        "actor_rollout_ref.model.path": paths.model,
        "data.train_files": paths.train_files,
        "data.val_files": paths.val_files,
        "data.max_prompt_length": MAX_PROMPT_LENGTH,
        "data.max_response_length": sched.max_new_tokens,
        "data.train_batch_size": sched.prompts_per_step,
        "data.seed": spec.seed,
        "data.filter_overlong_prompts": True,
        "trainer.total_training_steps": sched.steps,
        "trainer.total_epochs": 1000,
        "trainer.nnodes": model.nodes,
        "trainer.n_gpus_per_node": model.gpus_per_node,
        "trainer.project_name": verl_project_name(cfg),
        "trainer.experiment_name": spec.run_id.replace("/", "-"),
        "trainer.logger": verl_loggers(cfg),
        "trainer.default_local_dir": f"{paths.out}/verl_checkpoints",
        # verl's v1 trainer saves on this cadence only: derived from the step and save times (verl_sizing)
        "trainer.save_freq": save_every(cfg, model),
        # the deadline save of verl's legacy trainer (trainer.use_v1=false) only (verl_sizing)
        "trainer.esi_redundant_time": esi_margin_s(model),
        "trainer.max_actor_ckpt_to_keep": MAX_CKPTS,  # resume point + one spare; each holds optimizer state
        "trainer.resume_mode": "auto",
        "trainer.val_before_train": False,
        "trainer.test_freq": -1,
        # optimizer
        f"{A}.optim.lr": sched.lr,
        f"{A}.optim.weight_decay": sched.weight_decay,
        f"{A}.optim.clip_grad": sched.grad_clip,
        f"{A}.optim.lr_warmup_steps": sched.warmup_steps,
        # Megatron parallelism and batching
        f"{A}.megatron.tensor_model_parallel_size": par.tp,
        f"{A}.megatron.pipeline_model_parallel_size": par.pp,
        f"{A}.megatron.seed": spec.seed,
        # The sync trainer colocates the actor and vLLM: while vLLM generates with its share of each GPU
        # (`gpu_memory_utilization`, verl's 0.5), the actor's weights, gradient buffers and optimizer state
        # (~30-36 GB per GPU for the paper models: bf16 weights over TP, fp32 grads, a distributed
        # optimizer over DP x TP) wait in host memory; moving them costs seconds of a step of an hour
        f"{A}.megatron.param_offload": True,
        f"{A}.megatron.optimizer_offload": True,
        f"{R}.gpu_memory_utilization": ROLLOUT_GPU_MEMORY,
        # verl 0.9.1 imports Megatron-Bridge (`megatron.bridge`) unless told to use mbridge, which the
        # train image's lock holds (containers/train/requirements.lock; checked by the tests)
        f"{A}.megatron.vanilla_mbridge": VANILLA_MBRIDGE,
        f"{A}.megatron.override_transformer_config.attention_backend": ATTENTION_BACKEND,
        **{f"{A}.megatron.override_transformer_config.{k}": v for k, v in RECOMPUTE.items()},
        f"{A}.ppo_mini_batch_size": max(1, sched.prompts_per_step // sched.mini_batches),
        f"{A}.ppo_epochs": sched.ppo_epochs,
        f"{A}.use_dynamic_bsz": True,
        f"{A}.ppo_max_token_len_per_gpu": 2 * max_len,
        # the objective
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": algo.norm_adv_by_std,
        "algorithm.use_kl_in_reward": False,
        f"{A}.clip_ratio_low": algo.clip_low,
        f"{A}.clip_ratio_high": algo.clip_high,
        f"{A}.loss_agg_mode": algo.loss_agg_mode,
        f"{A}.entropy_coeff": algo.entropy_coef,
        f"{A}.use_kl_loss": algo.kl_coef > 0,
        f"{A}.kl_loss_coef": algo.kl_coef,
        f"{A}.kl_loss_type": VERL_KL_LOSS_TYPES[algo.kl_type],
        f"{A}.policy_loss.loss_mode": policy_loss_mode(variant),
        # rollout (vLLM)
        f"{R}.name": "vllm",
        f"{R}.n": algo.group_size,
        f"{R}.temperature": sched.temperature,
        f"{R}.top_p": sched.top_p,
        f"{R}.tensor_model_parallel_size": par.rollout_tp,
        f"{R}.calculate_log_probs": True,
        f"{R}.seed": spec.seed,  # vLLM's sampling seed (verl's default is 42 for every run)
        f"{R}.quantization": "fp8" if (variant.fp8 and fp8.rollout) else None,
        # the mismatch correction (TIS, sequence TIS, masked IS, IcePop) and the fp16 arm: verl_corrections
        **correction_overrides(cfg, variant),
        **precision_overrides(variant),
    }
    if algo.clip_c is not None:
        ov[f"{A}.clip_ratio_c"] = algo.clip_c
    if isinstance(algo, DAPOConfig):
        ov["reward.reward_manager.name"] = "dapo"
        ov["algorithm.filter_groups.enable"] = algo.dynamic_sampling
        ov["algorithm.filter_groups.metric"] = "acc"
        # verl 0.9.1's v1 trainer ignores max_num_gen_batches; it bounds the generation batches in flight
        ov["algorithm.filter_groups.max_inflight_gen_batches"] = algo.max_resample_rounds + 1
        ov["+reward.reward_kwargs.max_resp_len"] = sched.max_new_tokens
        ov["+reward.reward_kwargs.overlong_buffer_cfg.enable"] = algo.overlong_buffer_len > 0
        ov["+reward.reward_kwargs.overlong_buffer_cfg.len"] = algo.overlong_buffer_len
        ov["+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor"] = algo.overlong_penalty_factor
        # verl's DAPO reward manager reads `.log` from this struct config (ConfigAttributeError without it);
        # verl's own DAPO recipes pass log=False
        ov["+reward.reward_kwargs.overlong_buffer_cfg.log"] = False
    if variant.fp8 and fp8.gemms:
        for key, value in fp8_transformer_overrides(fp8, spec.granularity).items():
            ov[f"+{A}.megatron.override_transformer_config.{key}"] = value
    if variant.fp8 and fp8.optimizer_state:
        # The lowest-precision Adam moments verl's Megatron optimizer config accepts are bf16.
        ov[f"{A}.optim.use_precision_aware_optimizer"] = True
        ov[f"{A}.optim.exp_avg_dtype"] = "bf16"
        ov[f"{A}.optim.exp_avg_sq_dtype"] = "bf16"
    if variant.fp8 and fp8.rollout and fp8.kv_cache:
        ov[f"+{R}.engine_kwargs.vllm.kv_cache_dtype"] = "fp8"
    out = [f"{k}={_q(v)}" for k, v in ov.items()]
    # Ray's runtime_env takes strings only (ray.init raises TypeError on an int or a bool): quoted always
    env = {"VERL_USE_EXTERNAL_MODULES": LOSS_MODULE, LOSS_SPEC_ENV: f"{paths.out}/verl_loss.json",
           **verl_tracking_env(cfg, paths.out)}  # fmt: skip
    return out + [f"{RAY_ENV_VARS}.{k}={_q_str(v)}" for k, v in env.items()]


def deviations(cfg: ExperimentConfig, spec: RunSpec | ResolvedRun) -> list[str]:
    """Every way a verl run differs from the variant the config asks for (as the reference trainer reads
    it): recorded in the run's `verl_overrides.json` and `summary.json`, and listed by the report."""
    out = []
    run = resolve_run(cfg, spec)
    spec, variant, algo, fp8 = run.spec, run.variant, run.algo, run.fp8
    if variant.fp8 and fp8.rollout and spec.granularity != "blockwise":
        out.append(
            f"rollout FP8 is blockwise: verl quantizes vLLM's weights in 128x128 blocks (e4m3) whatever "
            f"the training granularity ({spec.granularity})"
        )
    if variant.fp8 and fp8.rollout and fp8.format != "e4m3":
        out.append(f"rollout FP8 format e4m3 (vLLM), not fp8.format {fp8.format!r}")
    if variant.fp8 and fp8.optimizer_state:
        out.append("optimizer moments in bf16: verl's Megatron optimizer config exposes no FP8 Adam state")
    t = cfg.tracking
    if t.wandb.enabled and t.mlflow.enabled and t.wandb.project != t.mlflow.experiment:
        out.append(
            f"MLflow experiment {t.wandb.project!r}, not tracking.mlflow.experiment {t.mlflow.experiment!r}: "
            f"verl names the W&B project and the MLflow experiment alike (trainer.project_name)"
        )
    if isinstance(algo, DAPOConfig) and algo.dynamic_sampling:
        out.append(
            f"dynamic sampling refills dropped groups without a round cap: verl's v1 trainer bounds the "
            f"generation batches in flight ({algo.max_resample_rounds + 1}), not max_resample_rounds"
        )
        if algo.overlong_buffer_len > 0:
            out.append(
                "dynamic sampling drops the groups of one accuracy (verl's filter_groups.metric acc, the DAPO "
                "paper's rule); the reference trainer drops those of one shaped reward (accuracy plus the "
                "overlong penalty), so it keeps a group of one accuracy whose lengths differ"
            )
    return out


def overrides_json(cfg: ExperimentConfig, spec: RunSpec | ResolvedRun, paths: VerlPaths) -> str:
    """The overrides, loss spec and deviations as one JSON document (what `fp8rl verl overrides` prints)."""
    return json.dumps(
        {
            "run_id": spec.run_id,
            "config_name": CONFIG_NAME,
            "overrides": verl_overrides(cfg, spec, paths),
            "loss_spec": loss_spec(cfg, spec),
            "deviations": deviations(cfg, spec),
        },
        indent=2,
    )
