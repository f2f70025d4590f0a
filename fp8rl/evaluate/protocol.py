"""The eval protocol: how each lm-eval task decodes and is scored, and how vLLM spreads over the GPUs.

Reasoning-RL papers evaluate a policy in its chat template, with a generation budget that fits long
reasoning, sampling settings stated up front, and avg@k on small sets like AIME (k samples per problem,
the mean of their scores). The config states all of it (`eval.max_gen_toks`, `eval.temperature`,
`eval.top_p`, `eval.repeats`; docs/interfaces.md#eval-protocol); this module turns it into lm-eval task
configs:

- `task_specs`: every lm-eval task of a plan with the protocol applied. A task the protocol leaves alone
  (the smoke/small tiers: no decoding key set) keeps its spec as it is; lm-eval's own tasks that it
  changes are resolved to their full YAML config (lm-eval's loader: `include`, `!function`) and passed
  inline, since an inline dict replaces a registered task's config rather than updating it.
- `answer_format: dapo` (fp8rl.evaluate.answer_format): the math tasks asked and read in the training
  set's format, before the decoding settings and avg@k are applied.
- `avg_at_k`: lm-eval's `repeats` + a `take_first_k` filter that keeps all k responses + `AvgAtK`, which
  scores each response with the task's own `process_results` and reports the mean as `avg@k`.
- `vllm_parallelism`: tensor parallel only as wide as a replica needs, data-parallel replicas over the
  rest of the rule's GPUs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fp8rl.config import EvalConfig, ExperimentConfig, ModelConfig
from fp8rl.config.runs import RunSpec
from fp8rl.evaluate.answer_format import dapo_task
from fp8rl.evaluate.eval_tasks import EvalInputError
from fp8rl.run_files import RunDir

# Tokens reserved for the prompt (chat template, few-shot turns) on top of eval.max_gen_toks.
PROMPT_TOKENS = 4096
# A replica's bf16 weights may fill at most this share of its GPUs; the rest holds the KV cache of
# long generations (vLLM's gpu_memory_utilization is GPU_MEMORY_UTILIZATION).
WEIGHT_SHARE = 0.5
GPU_MEMORY_UTILIZATION = 0.85
BYTES_PER_PARAM = 2  # bf16 checkpoints
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMBT])\s*$", re.IGNORECASE)
_SCALE = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


class AvgAtK:
    """`process_results` of an avg@k task: the task's own scorer on each of the k responses, averaged.

    lm-eval hands it `[responses]` (one request per problem; the `take_first_k` filter keeps the list)."""

    def __init__(self, score: Callable[[dict, list], dict], k: int, metric: str):
        self.score, self.k, self.metric = score, k, metric
        self.name = f"avg@{k}"

    def __call__(self, doc: dict, results: list) -> dict[str, float]:
        responses = results[0] if results and isinstance(results[0], list) else results
        if len(responses) != self.k:
            raise ValueError(
                f"{self.name}: got {len(responses)} responses for one problem, expected {self.k}"
            )
        values = [float(self.score(doc, [r])[self.metric]) for r in responses]
        return {self.name: sum(values) / self.k}


def generation_kwargs(ev: EvalConfig, base: dict | None) -> dict:
    """The task's generation_kwargs (its stop sequences kept) with the config's decoding settings."""
    out = dict(base or {})
    if ev.max_gen_toks is not None:
        out["max_gen_toks"] = ev.max_gen_toks
    if ev.temperature is not None:
        out["temperature"] = ev.temperature
        out["do_sample"] = ev.temperature > 0.0
        out.pop("top_p", None)
    if ev.top_p is not None:
        out["top_p"] = ev.top_p
    return out


def avg_at_k(cfg: dict, k: int, name: str) -> dict:
    """Overrides that sample k responses per problem and report their mean score as `avg@{k}`."""
    score = cfg.get("process_results")
    metrics = [m["metric"] for m in cfg.get("metric_list") or []]
    if not callable(score) or len(metrics) != 1:
        raise EvalInputError(
            f"eval.repeats.{name}: avg@k needs a task scored by one `process_results` metric "
            f"(lm-eval task {cfg.get('task')!r} has {'none' if not callable(score) else metrics})"
        )
    avg = AvgAtK(score, k, metrics[0])
    return {
        "repeats": k,
        "filter_list": [{"name": f"first_{k}", "filter": [{"function": "take_first_k", "k": k}]}],
        "process_results": avg,
        "metric_list": [{"metric": avg.name, "aggregation": "mean", "higher_is_better": True}],
    }


def changes_tasks(ev: EvalConfig) -> bool:
    return (
        any(v is not None for v in (ev.max_gen_toks, ev.temperature, ev.top_p))
        or any(k > 1 for k in ev.repeats.values())
        or ev.answer_format != "task"
    )


def task_specs(
    specs: list[str | dict], report_names: dict[str, str], ev: EvalConfig, resolve: Callable[[str], dict]
) -> list[str | dict]:
    """The plan's lm-eval specs with the protocol applied; `resolve(name)` gives a registered task's
    full config. `report_names` maps lm-eval's task name to the config's (`minerva_math500` -> `math500`)."""
    if not changes_tasks(ev):
        return list(specs)
    out: list[str | dict] = []
    for spec in specs:
        cfg = dict(resolve(spec) if isinstance(spec, str) else spec)
        name = report_names.get(cfg["task"], cfg["task"])
        if ev.answer_format == "dapo":
            cfg = dapo_task(cfg, name)
        if cfg.get("output_type", "generate_until") == "generate_until":
            cfg["generation_kwargs"] = generation_kwargs(ev, cfg.get("generation_kwargs"))
        k = ev.repeats.get(name, 1)
        if k > 1:
            cfg.update(avg_at_k(cfg, k, name))
        out.append(cfg)
    return out


def param_count(params: str | None) -> float | None:
    """`ModelConfig.params` ('8B', '135M', '1.5B') as a number; None when absent or unreadable."""
    m = _SIZE.match(params or "")
    return float(m.group(1)) * _SCALE[m.group(2).upper()] if m else None


def vllm_parallelism(params: str | None, gpus: int, gpu_memory_gb: float) -> tuple[int, int]:
    """(tensor_parallel_size, data_parallel_size) for `gpus` GPUs of `gpu_memory_gb` each.

    The tensor-parallel width is the smallest power of two (dividing `gpus`) whose GPUs hold the bf16
    weights in WEIGHT_SHARE of their memory; the remaining factor runs as independent data-parallel
    replicas. A model of unknown size gets every GPU as one tensor-parallel replica."""
    gpus = max(1, gpus)
    n = param_count(params)
    if n is None:
        return gpus, 1
    weights_gb = n * BYTES_PER_PARAM / 1e9
    for tp in (2**i for i in range(gpus.bit_length())):
        if gpus % tp == 0 and weights_gb <= WEIGHT_SHARE * tp * gpu_memory_gb:
            return tp, gpus // tp
    return gpus, 1


def checkpoint_model(cfg: ExperimentConfig, checkpoint: Path) -> ModelConfig | None:
    """The config's model a checkpoint was trained from: its run's summary names the run id; a config
    with one model needs no summary. None when neither tells."""
    run = RunDir(checkpoint.parent)
    if run.summary.is_file():
        return cfg.model(RunSpec.parse(run.read_summary()["run_id"]).model)
    return cfg.models[0] if len(cfg.models) == 1 else None


def max_model_len(ev: EvalConfig, checkpoint: Path) -> int | None:
    """Context vLLM reserves: prompt budget + eval.max_gen_toks, capped at the model's positions."""
    if ev.max_gen_toks is None:
        return None
    want = PROMPT_TOKENS + ev.max_gen_toks
    config = checkpoint / "config.json"
    limit = json.loads(config.read_text()).get("max_position_embeddings") if config.is_file() else None
    return min(want, int(limit)) if limit else want


def vllm_model_args(cfg: ExperimentConfig, checkpoint: Path) -> dict[str, Any]:
    """lm-eval `vllm` model_args for the eval rule's GPUs and the checkpoint's model size."""
    gpus = max(1, cfg.resources_for("eval").gpus)
    model = checkpoint_model(cfg, checkpoint)
    tp, dp = vllm_parallelism(model.params if model else None, gpus, cfg.eval.gpu_memory_gb)
    args: dict[str, Any] = {
        "pretrained": str(checkpoint),
        "dtype": "auto",
        "gpu_memory_utilization": GPU_MEMORY_UTILIZATION,
        "tensor_parallel_size": tp,
        "data_parallel_size": dp,
    }
    if model is not None and model.think_end_token:  # lm-eval strips the thought before scoring
        args["enable_thinking"], args["think_end_token"] = True, model.think_end_token
    if cfg.eval.max_gen_toks is not None:
        args["max_gen_toks"] = cfg.eval.max_gen_toks
        args["max_model_len"] = max_model_len(cfg.eval, checkpoint)
    return args
