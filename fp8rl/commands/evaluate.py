"""`fp8rl eval lm-eval`, `fp8rl eval agent`, `fp8rl eval heldout`: score one checkpoint, write one result file.

    fp8rl eval lm-eval --config FILE --checkpoint DIR --data DIR --out FILE [--set k=v ...]
    fp8rl eval agent   --config FILE --checkpoint DIR --data DIR --out FILE [--set k=v ...]
    fp8rl eval heldout --config FILE --checkpoint DIR --data DIR --out FILE [--set k=v ...]

`heldout` is the held-out bf16 endpoint (`eval.heldout`; fp8rl.engine.heldout): the checkpoint sampled
with the bf16 sampler on prompts that neither train.jsonl nor test.jsonl of `--data` holds (greedy
accuracy, sampled reward and answer-format rate at the training temperature); any checkpoint a run kept
(`checkpoint/`, a base, `checkpoints/step{N}/` of `schedule.keep_every`) can be scored.

Tasks and their protocol come from the config (`eval.lm_eval_tasks`, `eval.agent`, `eval.limit`,
`eval.batch_size`, `eval.max_gen_toks`, `eval.temperature`, `eval.top_p`, `eval.repeats`); the output
follows docs/interfaces.md (fp8rl.evaluate.schema), and the lm-eval suite keeps its per-sample log beside
it (`lm_eval.samples.jsonl`). A missing checkpoint, data file or
task, a broken task YAML or an `--out` that cannot be written is reported before any model is loaded,
naming the file, and exits 2. Local tasks run fully offline (HF_DATASETS_OFFLINE=1, HF_HUB_OFFLINE=1).
A reference-trainer checkpoint whose files are not the ones its `state.json` records (damaged after
training: fp8rl.checkpoint_files) is refused the same way. The result records the checkpoint's
fingerprint (`checkpoint_digest`). Working files (datasets, BFCL's
output) live in a temp folder beside `--out` (`.{out name}.*.tmp`), removed at the end; one evaluation
per `--out` at a time (`.{out name}.lock`), and the next one removes what a killed one left.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

from fp8rl import numerics
from fp8rl.commands.common import UsageError, add_command, add_config_args
from fp8rl.config_loader import load_config

SUITE_TASKS = {"lm_eval": "lm_eval_tasks", "agent": "agent"}


def _check_out(out: Path) -> None:
    """UsageError unless the result file `out` can be written: before any evaluation work."""
    if out.is_dir():
        raise UsageError(f"--out {out}: is a directory, not a result file")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot create its folder ({exc.strerror or exc})") from None
    try:  # a real write: permissions, a read-only filesystem, a full disk
        fd, probe = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write in {out.parent} ({exc.strerror or exc})") from None


def _evaluate(args: argparse.Namespace, suite: str) -> int:
    from fp8rl.evaluate.eval_tasks import BFCL_PREFIX, EvalInputError, eval_task_problems, local_task_path

    cfg = load_config(args.file, args.set, checks=[eval_task_problems])
    numerics.ensure(cfg.numerics)

    names = getattr(cfg.eval, SUITE_TASKS[suite])
    checkpoint, data, out = Path(args.checkpoint), Path(args.data), Path(args.out)
    _check_out(out)
    if all(local_task_path(suite, n).is_file() for n in names):
        os.environ["HF_DATASETS_OFFLINE"] = "1"
        os.environ["HF_HUB_OFFLINE"] = "1"

    import torch

    from fp8rl.checkpoint_files import CheckpointError, verify_files
    from fp8rl.evaluate.bfcl import run_bfcl
    from fp8rl.evaluate.eval_tasks import plan_tasks
    from fp8rl.evaluate.lm_eval_runner import (
        check_chat_template,
        check_checkpoint,
        has_chat_template,
        model_spec,
        run_lm_eval,
    )
    from fp8rl.evaluate.schema import native_path, samples_path, write_eval
    from fp8rl.provenance import provenance
    from fp8rl.quiet import progress_as_lines

    torch.set_num_threads(cfg.resources_for("eval").threads)
    from fp8rl.checkpoint_files import checkpoint_digest
    from fp8rl.engine.data import load_split_lines
    from fp8rl.io import atomic_write_text, remove_stale_temps
    from fp8rl.locks import RunDirLocked, hold_lock

    try:
        with hold_lock(out.with_name(f".{out.name}.lock"), "wait for that evaluation to end"):
            for name in (out.name, samples_path(out).name, native_path(out).name):
                remove_stale_temps(out.parent, name)  # what a killed evaluation left
            work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
            try:
                check_checkpoint(checkpoint)
                try:  # the files the trainer recorded, byte for byte, and no other (none recorded: not checked)
                    verify_files(checkpoint, "retrain the run, or restore the checkpoint")
                except CheckpointError as exc:
                    raise EvalInputError(str(exc)) from None
                check_chat_template(checkpoint)
                if not data.is_dir():
                    raise EvalInputError(f"data directory {data} not found")
                split = "test.jsonl" if suite == "lm_eval" else "tool_test.jsonl"
                if (data / split).is_file():  # every row, before any model is loaded
                    try:
                        load_split_lines(data, split, allow_empty=True)
                    except ValueError as exc:
                        raise EvalInputError(str(exc)) from None
                digest = checkpoint_digest(checkpoint)
                results, failed = [], []
                with progress_as_lines():  # in a log file, a progress bar is a line, not redraws
                    plan = plan_tasks(suite, names, data, cache_dir=work / "datasets")
                    model, model_args = model_spec(cfg, checkpoint) if plan.lm_eval_specs else ("bfcl", {})
                    samples = samples_path(out) if suite == "lm_eval" else None
                    native = native_path(out) if suite == "lm_eval" else None
                    bfcl_tasks = [BFCL_PREFIX + c for c in plan.bfcl]
                    harnesses = [
                        ([n for n in names if n not in bfcl_tasks], plan.lm_eval_specs,
                         lambda: run_lm_eval(cfg, checkpoint, plan, samples_out=samples, native_out=native)),
                        (bfcl_tasks, plan.bfcl, lambda: run_bfcl(cfg, checkpoint, plan.bfcl, work / "bfcl")),
                    ]  # fmt: skip
                    for tasks, planned, run in harnesses:
                        if planned:
                            limit = f" ({cfg.eval.limit} examples each)" if cfg.eval.limit else ""
                            print(f"evaluating {', '.join(tasks)}{limit}", file=sys.stderr, flush=True)
                            results += _run_or_record(run, tasks, failed, args.on_failure)
                if samples is not None and failed and not samples.exists():
                    atomic_write_text(samples, "")  # the rule's second output: no sample was scored
            except EvalInputError as exc:
                raise UsageError(str(exc)) from None
            finally:
                shutil.rmtree(work, ignore_errors=True)
            prov = provenance(config_digest=cfg.digest())
            prov["eval"] = {
                "model": model,
                "model_args": model_args,
                "chat_template": has_chat_template(checkpoint),
                "limit": cfg.eval.limit,
                "tasks": names,
                **cfg.eval.model_dump(include={"max_gen_toks", "temperature", "top_p", "repeats"}),
            }
            write_eval(out, checkpoint, suite, results, prov, checkpoint_digest=digest, failed=failed)
    except RunDirLocked as exc:
        raise UsageError(str(exc)) from None
    for r in results:
        err = f" ± {r.stderr:.3f}" if r.stderr is not None else ""
        print(f"{r.task:<16} {r.metric:<28} {r.value:.3f}{err}  (n={r.n})")
    for f in failed:
        print(
            f"FAILED {', '.join(f['tasks'])}: {f['reason']} (recorded in {out}; the report lists it)",
            file=sys.stderr,
        )
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _heldout(args: argparse.Namespace) -> int:
    """`fp8rl eval heldout`: the held-out bf16 endpoint of one checkpoint (module docstring)."""
    cfg = load_config(args.file, args.set)
    numerics.ensure(cfg.numerics)
    if cfg.eval.heldout is None:
        raise UsageError(f"{args.file}: eval.heldout is not set (e.g. `--set eval.heldout.prompts=512`)")
    checkpoint, data, out = Path(args.checkpoint), Path(args.data), Path(args.out)
    _check_out(out)

    import torch

    from fp8rl.checkpoint_files import CheckpointError, checkpoint_digest, verify_files
    from fp8rl.engine.heldout import heldout_rows, score_checkpoint
    from fp8rl.evaluate.schema import TaskResult, write_eval
    from fp8rl.locks import RunDirLocked, hold_lock
    from fp8rl.provenance import provenance

    if not (checkpoint / "config.json").is_file():
        raise UsageError(f"--checkpoint {checkpoint}: not a model checkpoint (no config.json)")
    try:  # the files the trainer recorded, byte for byte (a base records none: not checked)
        verify_files(checkpoint, "retrain the run, or restore the checkpoint")
        rows = heldout_rows(cfg, data)
    except (CheckpointError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    torch.set_num_threads(cfg.resources_for("eval").threads)
    try:
        with hold_lock(out.with_name(f".{out.name}.lock"), "wait for that evaluation to end"):
            scores = score_checkpoint(cfg, checkpoint, rows)
            results = [TaskResult("heldout", s.metric, s.value, s.stderr, s.n) for s in scores]
            prov = provenance(config_digest=cfg.digest())
            prov["eval"] = {
                "sampler": "bf16-emulated",
                **cfg.eval.heldout.model_dump(),
                "temperature": cfg.schedule.temperature,
                "max_new_tokens": cfg.schedule.max_new_tokens,
            }
            write_eval(
                out, checkpoint, "heldout", results, prov, checkpoint_digest=checkpoint_digest(checkpoint)
            )
    except RunDirLocked as exc:
        raise UsageError(str(exc)) from None
    for r in results:
        print(f"heldout  {r.metric:<16} {r.value:.4f} ± {r.stderr:.4f}  (n={r.n})")
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _run_or_record(run, tasks: list[str], failed: list[dict], on_failure: str) -> list:
    """The harness's results; with `--on-failure record`, a harness that raises (after the inputs were
    checked: a crash of lm-eval, vLLM or bfcl-eval) leaves its tasks in `failed` with the reason instead,
    so the tasks that finished are still written and the report still runs."""
    from fp8rl.evaluate.eval_tasks import EvalInputError

    try:
        return run()
    except EvalInputError:
        raise
    except Exception as exc:
        if on_failure != "record":
            raise
        traceback.print_exc()
        failed.append({"tasks": tasks, "reason": f"{type(exc).__name__}: {exc}"[:2000]})
        return []


def register(sub: argparse._SubParsersAction) -> None:
    p_eval = add_command(sub, "eval", help="evaluate a checkpoint: lm-eval tasks or the agent benchmark")
    eval_sub = p_eval.add_subparsers(dest="eval_command", required=True, metavar="SUITE")
    for name, suite, help_text in (
        ("lm-eval", "lm_eval", "lm-eval tasks of eval.lm_eval_tasks -> eval/lm_eval.json"),
        ("agent", "agent", "function-calling benchmark of eval.agent -> eval/agent.json"),
    ):
        p = add_command(eval_sub, name, help=help_text)
        add_config_args(p)
        p.add_argument("--checkpoint", required=True, help="Hugging Face model directory")
        p.add_argument(
            "--data", required=True, help="the tier's data directory (test.jsonl, tool_test.jsonl)"
        )
        p.add_argument("--out", required=True, help="result JSON to write")
        p.add_argument(
            "--on-failure",
            choices=("raise", "record"),
            default="raise",
            help="when a harness crashes: exit non-zero (raise), or write the tasks that finished with the "
            "failed ones listed, and exit 0 (record; the DAG's last attempt of an eval job)",
        )
        p.set_defaults(func=lambda a, s=suite: _evaluate(a, s))
    p = add_command(
        eval_sub,
        "heldout",
        help="the held-out bf16 endpoint of eval.heldout -> eval/heldout.json",
    )
    add_config_args(p)
    p.add_argument("--checkpoint", required=True, help="Hugging Face model directory (a run's, or a base)")
    p.add_argument("--data", required=True, help="the tier's data directory (train.jsonl, test.jsonl)")
    p.add_argument("--out", required=True, help="result JSON to write")
    p.set_defaults(func=_heldout)
