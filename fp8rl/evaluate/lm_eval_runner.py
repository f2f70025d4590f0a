"""Run lm-eval tasks on one checkpoint and normalise the scores (fp8rl.evaluate.schema).

The model is lm-eval's `hf` model (transformers, CPU or one GPU) for the reference backend and its
`vllm` model with a seed per request (`fp8rl-vllm`, fp8rl.evaluate.vllm_seeded) for the verl/paper
backend (imported lazily: a clear error without vllm), with tensor- and data-parallel sizes from
fp8rl.evaluate.protocol and `batch_size` auto (vLLM schedules its own batches; `eval.batch_size` sizes
the `hf` model's). Local tasks are built from their YAMLs with the data
files bound (fp8rl.evaluate.eval_tasks), the config's eval protocol is applied to every task (generation
length, sampling, avg@k), and all are instantiated before the model is loaded, so a broken task fails
fast and names its file. A checkpoint with a chat template is prompted in it, every render bounded
in time (`bounded_renders`). Decoding is the task
YAMLs' (greedy) unless the config states its own; `eval.limit` caps examples per task. Every scored
sample (prompt, responses, per-sample scores) goes to a JSONL file beside the scores when asked.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import signal
import threading
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from fp8rl import numerics
from fp8rl.checkpoint_files import not_a_file
from fp8rl.config import ExperimentConfig
from fp8rl.evaluate.eval_tasks import EvalInputError, TaskPlan
from fp8rl.evaluate.protocol import task_specs, vllm_model_args
from fp8rl.evaluate.schema import TaskResult, normalise_lm_eval, sample_records, write_samples
from fp8rl.io import atomic_write_text

# stderr of a mean is analytic in lm-eval; bootstrap only serves other aggregations (none here).
BOOTSTRAP_ITERS = 1000


def check_checkpoint(checkpoint: Path) -> None:
    """A Hugging Face model directory: config.json and weights, each a file; EvalInputError naming what
    is missing or not a file, and a tokenizer config that cannot be read."""
    if not checkpoint.is_dir():
        raise EvalInputError(f"checkpoint {checkpoint} not found (did the training run finish?)")
    if not (checkpoint / "config.json").is_file():
        raise EvalInputError(f"checkpoint {checkpoint / 'config.json'} not found: not a Hugging Face model")
    weights = [*checkpoint.glob("*.safetensors"), *checkpoint.glob("*.bin")]
    if not weights:
        raise EvalInputError(f"checkpoint {checkpoint}: no model weights (*.safetensors)")
    for path in [checkpoint / "config.json", *weights]:
        if not path.is_file():
            raise EvalInputError(f"checkpoint {path}: not a file")
    if (path := not_a_file(checkpoint)) is not None:  # transformers would blame a missing package
        raise EvalInputError(f"checkpoint {path}: not a file")
    has_chat_template(checkpoint)  # a broken tokenizer_config.json is named here, before any work


# A chat template renders a prompt in milliseconds; one that loops for longer is refused (a template with
# nested loops of the sandbox's 100 000-item ranges ran for hours on every prompt).
CHAT_TEMPLATE_SECONDS = 10.0


class _Slow(Exception):
    pass


def _template_file(checkpoint: Path) -> Path:
    where = checkpoint / "chat_template.jinja"
    return where if where.is_file() else checkpoint / "tokenizer_config.json"


@contextmanager
def _deadline(seconds: float):
    """Raise _Slow in the block after `seconds` (SIGALRM, so only on the main thread; elsewhere the
    block is not timed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _stop(signum, frame):
        raise _Slow

    previous = signal.signal(signal.SIGALRM, _stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_chat_template(checkpoint: Path, seconds: float | None = None) -> None:
    """Render the checkpoint's chat template (if it has one) on a one-turn conversation within `seconds`
    (default CHAT_TEMPLATE_SECONDS; main thread only, `_deadline`); EvalInputError naming the template
    when it takes longer or fails to render. The eval's own renders are bounded too (`bounded_renders`):
    a template may loop on content this probe does not have."""
    seconds = CHAT_TEMPLATE_SECONDS if seconds is None else seconds
    if not has_chat_template(checkpoint):
        return
    from transformers import AutoTokenizer

    where = _template_file(checkpoint)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    except Exception as exc:  # transformers raises many kinds for a broken tokenizer folder
        raise EvalInputError(
            f"{checkpoint}: the tokenizer cannot be loaded ({type(exc).__name__}: {exc})"
        ) from None
    try:
        with _deadline(seconds):
            tokenizer.apply_chat_template(
                [{"role": "user", "content": "1+1="}], tokenize=False, add_generation_prompt=True
            )
    except _Slow:
        raise EvalInputError(
            f"{where}: the chat template takes more than {seconds:g} s to render one prompt"
        ) from None
    except Exception as exc:
        raise EvalInputError(
            f"{where}: the chat template does not render ({type(exc).__name__}: {exc})"
        ) from None


@contextmanager
def bounded_renders(checkpoint: Path, seconds: float | None = None):
    """Bound every chat-template render in the block to `seconds` (default CHAT_TEMPLATE_SECONDS):
    lm-eval's `hf` and `vllm` models render each prompt through the tokenizer's `apply_chat_template`,
    which is wrapped here; a render that takes longer is an EvalInputError naming the template and the
    prompt's start, not a hung eval."""
    from transformers import PreTrainedTokenizerBase

    seconds = CHAT_TEMPLATE_SECONDS if seconds is None else seconds
    original = PreTrainedTokenizerBase.apply_chat_template

    def bounded(self, conversation, *args, **kwargs):
        try:
            with _deadline(seconds):
                return original(self, conversation, *args, **kwargs)
        except _Slow:
            last = (
                conversation[-1].get("content", "")
                if conversation and isinstance(conversation[-1], dict)
                else ""
            )
            raise EvalInputError(
                f"{_template_file(checkpoint)}: the chat template takes more than {seconds:g} s to render "
                f"an eval prompt ({str(last)[:60]!r}...)"
            ) from None

    PreTrainedTokenizerBase.apply_chat_template = bounded
    try:
        yield
    finally:
        PreTrainedTokenizerBase.apply_chat_template = original


def model_spec(cfg: ExperimentConfig, checkpoint: Path) -> tuple[str, dict[str, Any]]:
    """lm-eval model name and arguments: `hf` for the reference backend, `fp8rl-vllm` (lm-eval's `vllm`
    with a sampling seed per request: fp8rl.evaluate.vllm_seeded) for verl."""
    if cfg.backend == "verl":
        if importlib.util.find_spec("vllm") is None:
            raise EvalInputError(
                "backend 'verl' evaluates with lm-eval's 'vllm' model, but vllm is not installed "
                "(pip install -e '.[gpu]', or run the eval rule in the eval container)"
            )
        from fp8rl.evaluate.vllm_seeded import register

        return register(), vllm_model_args(cfg, checkpoint)
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return "hf", {"pretrained": str(checkpoint), "dtype": "float32", "device": device}


def has_chat_template(checkpoint: Path) -> bool:
    """Whether the checkpoint's tokenizer carries a chat template (a pretrained instruct model)."""
    if (checkpoint / "chat_template.jinja").is_file():
        return True
    config = checkpoint / "tokenizer_config.json"
    if not config.is_file():
        return False
    try:
        return "chat_template" in json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError) as exc:
        raise EvalInputError(f"{config}: not a readable tokenizer config ({exc})") from None


def registered_config(manager: Any, name: str) -> dict:
    """The full config of one of lm-eval's own tasks, read as lm-eval reads it (`include`, `!function`)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    entry = manager.task_index.get(name)
    if entry is None or entry.yaml_path is None:
        raise EvalInputError(f"eval.lm_eval_tasks: {name!r} is not an lm-eval task with a YAML config")
    try:
        return load_yaml(entry.yaml_path, resolve_func=True)
    except Exception as exc:  # a task's helper module may need extra packages (lm-eval[math])
        raise EvalInputError(
            f"{entry.yaml_path}: cannot read the task: {type(exc).__name__}: {exc}"
        ) from None


def local_dataset(spec: str | dict, paths: dict[str, str], resolve) -> str | dict:
    """The task spec reading its hub dataset from the fetched snapshot folder (`paths`, by repo id)
    instead of the hub id, which `datasets` cannot load offline without a prepared cache."""
    if not paths:
        return spec
    cfg = resolve(spec) if isinstance(spec, str) else spec
    if cfg.get("dataset_path") not in paths:
        return spec
    return {**cfg, "dataset_path": paths[cfg["dataset_path"]]}


def build_tasks(cfg: ExperimentConfig, plan: TaskPlan) -> tuple[list, Any]:
    """Instantiate every lm-eval task of the plan with the eval protocol applied (datasets are read
    here, before any model load); returns the tasks and the TaskManager (lm-eval's built-in index is
    scanned only when needed)."""
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_defaults=plan.needs_builtin_tasks)
    for spec in plan.lm_eval_specs:
        if isinstance(spec, str) and spec not in manager.all_tasks:
            raise EvalInputError(
                f"eval.lm_eval_tasks: {spec!r} is neither a task YAML under evals/ nor an lm-eval task"
            )
    specs = task_specs(
        plan.lm_eval_specs, plan.report_names, cfg.eval, lambda name: registered_config(manager, name)
    )
    specs = [local_dataset(s, plan.dataset_paths, lambda n: registered_config(manager, n)) for s in specs]
    tasks = []
    for spec in specs:
        name = spec if isinstance(spec, str) else spec["task"]
        try:
            loaded = manager.load([spec])
        except Exception as exc:  # lm-eval raises many kinds for a bad task config
            source = plan.sources.get(name, f"lm-eval task {name!r}")
            if (full := _disk_full(exc)) is not None:  # `datasets` wraps it as a dataset error
                raise EvalInputError(
                    f"{source}: no space left on the device while building the task "
                    f"({full.filename or 'its dataset cache'}): free some space and run again"
                ) from None
            raise EvalInputError(f"{source}: cannot build the task: {type(exc).__name__}: {exc}") from None
        tasks.extend(loaded["tasks"].values())
    return tasks, manager


def _disk_full(exc: BaseException) -> OSError | None:
    """The ENOSPC (or EDQUOT) error somewhere in `exc`'s chain of causes, or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def run_lm_eval(
    cfg: ExperimentConfig,
    checkpoint: Path,
    plan: TaskPlan,
    *,
    lm: Any = None,
    samples_out: Path | None = None,
    native_out: Path | None = None,
) -> list[TaskResult]:
    """Evaluate the checkpoint on the plan's lm-eval tasks; one TaskResult per task x metric.

    `lm` replaces the model built from `model_spec` (an `lm_eval.api.model.LM` instance).
    `samples_out`: write every scored sample there (JSONL, atomically; fp8rl.evaluate.schema).
    `native_out`: write lm-eval's own results there (`write_native`)."""
    import lm_eval

    tasks, manager = build_tasks(cfg, plan)
    name, args = model_spec(cfg, checkpoint) if lm is None else (lm, None)
    # A chat model is prompted in its chat template, as the trainer prompts it (encode_prompt).
    chat = lm is None and has_chat_template(checkpoint)
    # vLLM's engine and workers (processes the model starts) run on the GPUs: no CPU numerics pin there
    gpu = numerics.children_unpinned() if name == "fp8rl-vllm" else nullcontext()
    with bounded_renders(checkpoint) if chat else nullcontext(), gpu:
        raw = lm_eval.simple_evaluate(
            model=name,
            model_args=args,
            tasks=tasks,
            # vLLM batches all of a call's requests itself: chunks of eval.batch_size would cap its batch
            batch_size="auto" if name == "fp8rl-vllm" else cfg.eval.batch_size,
            limit=cfg.eval.limit,
            bootstrap_iters=BOOTSTRAP_ITERS,
            log_samples=samples_out is not None,
            task_manager=manager,
            apply_chat_template=chat,
        )
    if raw is None:  # not rank 0
        return []
    if samples_out is not None:
        write_samples(samples_out, sample_records(raw, plan.report_names))
    if native_out is not None:
        write_native(native_out, raw)
    return normalise_lm_eval(raw, plan.report_names)


def write_native(path: Path, raw: dict) -> Path:
    """lm-eval's results as its own `--output_path` writes them (`results`, `groups`, `configs`,
    `versions`, `n-shot`, `higher_is_better`, `n-samples`, `config`, ...; the samples are in the
    samples file), with lm-eval's conversion of what JSON cannot hold, atomically."""
    from lm_eval.utils import handle_non_serializable

    native = {k: v for k, v in raw.items() if k != "samples"}
    text = json.dumps(native, indent=2, default=handle_non_serializable, ensure_ascii=False)
    return atomic_write_text(path, text + "\n")
