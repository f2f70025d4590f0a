"""BFCL (Berkeley Function Calling Leaderboard) through `bfcl-eval`, for the paper tier's agent suite.

`bfcl-eval` ships its data and AST checker but pins numpy 1.26, so it lives in its own environment: the
`bfcl` executable is `$FP8RL_BFCL` if set, else `.venv-bfcl/bin/bfcl` in the repository (made by
`python -m venv .venv-bfcl && .venv-bfcl/bin/pip install bfcl-eval[oss_eval_vllm]`), else `bfcl` on
PATH; the bfcl image has it on PATH, with its own vLLM. It is run as two subprocesses (`bfcl generate`
with the vLLM backend on the local checkpoint, then `bfcl evaluate`) with `BFCL_PROJECT_ROOT` pointing at a scratch
folder, and the first line of each `score/**/BFCL_*_{category}_score.json` (`accuracy`,
`correct_count`, `total_count`) becomes one result. BFCL's model handler is chosen by name:
`$FP8RL_BFCL_MODEL`, else the run's model `bfcl_handler` (config), else its `hf_id` (prompt mode).
The names the pinned bfcl-eval knows are listed in containers/bfcl/handlers.txt (scripts/bfcl_handlers.py
writes it from the wheel's source); `bfcl_problems`, one of the config checks, refuses any other before a
job starts (bfcl-eval would fail at its first prompt).
"""

from __future__ import annotations

import difflib
import json
import math
import os
import shutil
import subprocess
from pathlib import Path

from fp8rl import numerics
from fp8rl.config import ExperimentConfig
from fp8rl.evaluate.eval_tasks import BFCL_CATEGORIES, BFCL_PREFIX, EVALS_DIR, EvalInputError
from fp8rl.evaluate.protocol import checkpoint_model
from fp8rl.evaluate.schema import TaskResult

HANDLERS_FILE = EVALS_DIR.parent / "containers" / "bfcl" / "handlers.txt"


def known_handlers(path: Path = HANDLERS_FILE) -> set[str]:
    """The model handler names of the pinned bfcl-eval (containers/bfcl/handlers.txt)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def bfcl_problems(cfg: ExperimentConfig) -> list[tuple[tuple, str]]:
    """A config check (`load_config(checks=...)`): every model the matrix runs, when the agent suite has
    BFCL categories, names a handler the pinned bfcl-eval has (`bfcl_handler`, else `hf_id`)."""
    if not any(name.startswith(BFCL_PREFIX) for name in cfg.eval.agent):
        return []
    known, out = known_handlers(), []
    for i, m in enumerate(cfg.models):
        handler = m.bfcl_handler or m.hf_id
        if m.name not in cfg.matrix.models:
            continue
        if handler is None:
            out.append((("models", i, "bfcl_handler"), "the agent suite runs BFCL: name the bfcl-eval model "
                        "handler whose prompt format this model uses"))  # fmt: skip
        elif handler not in known:
            close = difflib.get_close_matches(handler, sorted(known), n=5, cutoff=0.5)
            hint = f" (closest names: {', '.join(close)})" if close else ""
            out.append((("models", i, "bfcl_handler"), (
                f"bfcl-eval ({HANDLERS_FILE.relative_to(EVALS_DIR.parent)}) has no model handler "
                f"{handler!r}{hint}; set bfcl_handler to the one whose chat format the model uses")))  # fmt: skip
    return out


def find_bfcl() -> str:
    """Path of the `bfcl` executable; EvalInputError with the install command when there is none."""
    candidates = [os.environ.get("FP8RL_BFCL"), str(EVALS_DIR.parent / ".venv-bfcl" / "bin" / "bfcl")]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    on_path = shutil.which("bfcl")
    if on_path:
        return on_path
    raise EvalInputError(
        "the BFCL agent benchmark needs bfcl-eval in its own environment (it pins numpy 1.26): "
        "python -m venv .venv-bfcl && .venv-bfcl/bin/pip install 'bfcl-eval[oss_eval_vllm]', "
        "or set FP8RL_BFCL to its bfcl executable, or run the eval_agent rule in the bfcl image"
    )


def bfcl_model_name(cfg: ExperimentConfig, checkpoint: Path) -> str:
    """The BFCL handler to format prompts with: $FP8RL_BFCL_MODEL, else the run's model `bfcl_handler`,
    else its hf_id."""
    if os.environ.get("FP8RL_BFCL_MODEL"):
        return os.environ["FP8RL_BFCL_MODEL"]
    model = checkpoint_model(cfg, checkpoint)
    handler = (model.bfcl_handler or model.hf_id) if model else None
    if not handler:
        raise EvalInputError(
            f"BFCL needs a model handler name: set models[].bfcl_handler or FP8RL_BFCL_MODEL "
            f"(none known for {checkpoint})"
        )
    return handler


def bfcl_categories(names: list[str]) -> list[str]:
    unknown = [n for n in names if n not in BFCL_CATEGORIES]
    if unknown:
        raise EvalInputError(
            f"eval.agent: unknown BFCL category {', '.join(BFCL_PREFIX + n for n in unknown)}; "
            f"allowed: {', '.join(BFCL_PREFIX + n for n in BFCL_CATEGORIES)}"
        )
    return [BFCL_CATEGORIES[n] for n in names]


def read_scores(score_root: Path, names: list[str]) -> list[TaskResult]:
    """One TaskResult per category from bfcl's score files (header line of each)."""
    out = []
    for name in names:
        cat = BFCL_CATEGORIES[name]
        files = sorted(score_root.glob(f"**/BFCL_*_{cat}_score.json"))
        files = [f for f in files if f.name.split("_", 2)[2] == f"{cat}_score.json"]
        if len(files) != 1:
            raise RuntimeError(f"{score_root}: expected one score file for {cat!r}, found {len(files)}")
        head = json.loads(files[0].read_text().splitlines()[0])
        n = int(head["total_count"])
        p = float(head["accuracy"])
        stderr = math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else None  # as lm-eval's mean stderr
        out.append(TaskResult(BFCL_PREFIX + name, "ast_accuracy", p, stderr, n))
    return out


def run_bfcl(cfg: ExperimentConfig, checkpoint: Path, names: list[str], workdir: Path) -> list[TaskResult]:
    """Generate with vLLM and score with BFCL's AST checker; returns one result per category."""
    exe = find_bfcl()
    cats = ",".join(bfcl_categories(names))
    model = bfcl_model_name(cfg, checkpoint)
    # vLLM runs on the GPUs: no CPU numerics pin in its environment (numerics.unpinned)
    env = {**numerics.unpinned(os.environ), "BFCL_PROJECT_ROOT": str(workdir)}
    gpus = max(1, cfg.resources_for("eval").gpus)
    workdir.mkdir(parents=True, exist_ok=True)
    generate = [exe, "generate", "--model", model, "--test-category", cats, "--backend", "vllm"]
    generate += ["--num-gpus", str(gpus), "--local-model-path", str(checkpoint), "--allow-overwrite"]
    subprocess.run(generate, check=True, env=env)
    subprocess.run([exe, "evaluate", "--model", model, "--test-category", cats], check=True, env=env)
    return read_scores(workdir / "score", names)
