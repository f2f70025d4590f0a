"""What the two harness suites share (`lm_eval` and `agent`): the config's task names of the suite
planned (fp8rl.evaluate.eval_tasks), run through lm-eval or bfcl-eval, and one result file written.

Before any model is loaded the checkpoint (its recorded files byte for byte, its chat template) and
every row of the suite's test split are checked, each problem an `EvalInputError` naming the file.
Working files (datasets, BFCL's output) live in a temp folder beside the result file
(`.{out name}.*.tmp`), removed at the end; one evaluation per result file at a time (`.{out name}.lock`), and the next one removes what
a killed one left. With `on_failure="record"` a harness that crashes after those checks leaves its
tasks in the result's `failed` list instead of raising, so the tasks that finished are still written.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

from fp8rl.evaluate.eval_tasks import BFCL_PREFIX, EvalInputError, local_task_path
from fp8rl.evaluate.suites._registry import SuiteJob


def all_local(suite: str, names: list[str]) -> bool:
    """Whether every task of `suite` named in `names` is a local task YAML (read offline)."""
    return all(local_task_path(suite, n).is_file() for n in names)


def run_harness_suite(job: SuiteJob, suite: str, names: list[str], split: str, *, keep_samples: bool) -> None:
    """Score `job.checkpoint` on the tasks `names` of `suite` (whose test split in `job.data` is
    `split`) and write `job.out`; `keep_samples`: lm-eval's per-sample log and native results JSON
    beside it (fp8rl.evaluate.schema's `samples_path`, `native_path`)."""
    from fp8rl.checkpoint_files import CheckpointError, checkpoint_digest, verify_files
    from fp8rl.engine.data import load_split_lines
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
    from fp8rl.io import atomic_write_text, remove_stale_temps
    from fp8rl.locks import hold_lock
    from fp8rl.provenance import provenance
    from fp8rl.quiet import progress_as_lines

    cfg, checkpoint, data, out = job.cfg, job.checkpoint, job.data, job.out
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
                samples = samples_path(out) if keep_samples else None
                native = native_path(out) if keep_samples else None
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
                        results += _run_or_record(run, tasks, failed, job.on_failure)
            if samples is not None and failed and not samples.exists():
                atomic_write_text(samples, "")  # the rule's second output: no sample was scored
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
    for r in results:
        err = f" ± {r.stderr:.3f}" if r.stderr is not None else ""
        print(f"{r.task:<16} {r.metric:<28} {r.value:.3f}{err}  (n={r.n})")
    for f in failed:
        print(
            f"FAILED {', '.join(f['tasks'])}: {f['reason']} (recorded in {out}; the report lists it)",
            file=sys.stderr,
        )


def _run_or_record(run: Callable[[], list], tasks: list[str], failed: list[dict], on_failure: str) -> list:
    """The harness's results; with `on_failure="record"`, a harness that raises (after the inputs were
    checked: a crash of lm-eval, vLLM or bfcl-eval) leaves its tasks in `failed` with the reason instead,
    so the tasks that finished are still written and the report still runs."""
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
