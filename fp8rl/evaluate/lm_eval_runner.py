"""Run lm-eval tasks on one checkpoint and normalise the scores (fp8rl.evaluate.schema).

The model is lm-eval's `hf` model (transformers, CPU or one GPU) for the reference backend and its
`vllm` model for the verl/paper backend (imported lazily: a clear error without vllm). Local tasks are
built from their YAMLs with the data files bound (fp8rl.evaluate.eval_tasks) and instantiated before the
model is loaded, so a broken task fails fast and names its file. Decoding is greedy, as the task YAMLs
say; `eval.limit` caps examples per task.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from fp8rl.config import ExperimentConfig
from fp8rl.evaluate.eval_tasks import EvalInputError, TaskPlan
from fp8rl.evaluate.schema import TaskResult, normalise_lm_eval

# stderr of a mean is analytic in lm-eval; bootstrap only serves other aggregations (none here).
BOOTSTRAP_ITERS = 1000


def check_checkpoint(checkpoint: Path) -> None:
    """A Hugging Face model directory: config.json and weights; EvalInputError naming what is missing."""
    if not checkpoint.is_dir():
        raise EvalInputError(f"checkpoint {checkpoint} not found (did the training run finish?)")
    if not (checkpoint / "config.json").is_file():
        raise EvalInputError(f"checkpoint {checkpoint / 'config.json'} not found: not a Hugging Face model")
    if not any(checkpoint.glob("*.safetensors")) and not any(checkpoint.glob("*.bin")):
        raise EvalInputError(f"checkpoint {checkpoint}: no model weights (*.safetensors)")


def model_spec(cfg: ExperimentConfig, checkpoint: Path) -> tuple[str, dict[str, Any]]:
    """lm-eval model name and arguments: `hf` for the reference backend, `vllm` for verl."""
    if cfg.backend == "verl":
        if importlib.util.find_spec("vllm") is None:
            raise EvalInputError(
                "backend 'verl' evaluates with lm-eval's 'vllm' model, but vllm is not installed "
                "(pip install -e '.[gpu]', or run the eval rule in the eval container)"
            )
        gpus = max(1, cfg.resources_for("eval").gpus)
        return "vllm", {
            "pretrained": str(checkpoint),
            "tensor_parallel_size": gpus,
            "dtype": "auto",
            "gpu_memory_utilization": 0.85,
        }
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return "hf", {"pretrained": str(checkpoint), "dtype": "float32", "device": device}


def has_chat_template(checkpoint: Path) -> bool:
    """Whether the checkpoint's tokenizer carries a chat template (a pretrained instruct model)."""
    if (checkpoint / "chat_template.jinja").is_file():
        return True
    config = checkpoint / "tokenizer_config.json"
    return config.is_file() and "chat_template" in json.loads(config.read_text())


def build_tasks(plan: TaskPlan) -> tuple[list, Any]:
    """Instantiate every lm-eval task of the plan (datasets are read here, before any model load);
    returns the tasks and the TaskManager (lm-eval's built-in index is scanned only when needed)."""
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_defaults=plan.needs_builtin_tasks)
    tasks = []
    for spec in plan.lm_eval_specs:
        name = spec if isinstance(spec, str) else spec["task"]
        if isinstance(spec, str) and spec not in manager.all_tasks:
            raise EvalInputError(
                f"eval.lm_eval_tasks: {name!r} is neither a task YAML under evals/ nor an lm-eval task"
            )
        try:
            loaded = manager.load([spec])
        except Exception as exc:  # lm-eval raises many kinds for a bad task config
            source = plan.sources.get(name, f"lm-eval task {name!r}")
            raise EvalInputError(f"{source}: cannot build the task: {type(exc).__name__}: {exc}") from None
        tasks.extend(loaded["tasks"].values())
    return tasks, manager


def run_lm_eval(
    cfg: ExperimentConfig, checkpoint: Path, plan: TaskPlan, *, lm: Any = None
) -> list[TaskResult]:
    """Evaluate the checkpoint on the plan's lm-eval tasks; one TaskResult per task x metric.

    `lm` replaces the model built from `model_spec` (an `lm_eval.api.model.LM` instance)."""
    import lm_eval

    tasks, manager = build_tasks(plan)
    name, args = model_spec(cfg, checkpoint) if lm is None else (lm, None)
    raw = lm_eval.simple_evaluate(
        model=name,
        model_args=args,
        tasks=tasks,
        batch_size=cfg.eval.batch_size,
        limit=cfg.eval.limit,
        bootstrap_iters=BOOTSTRAP_ITERS,
        log_samples=False,
        task_manager=manager,
        # A chat model is prompted in its chat template, as the trainer prompts it (encode_prompt).
        apply_chat_template=lm is None and cfg.backend == "reference" and has_chat_template(checkpoint),
    )
    if raw is None:  # not rank 0
        return []
    return normalise_lm_eval(raw, plan.report_names)
