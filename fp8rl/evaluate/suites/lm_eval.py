"""`lm_eval`: the lm-eval tasks of `eval.lm_eval_tasks` (local task YAMLs under evals/lm_eval/, or
lm-eval's own tasks on the paper tier) -> `eval/lm_eval.json`, every scored sample beside it
(`lm_eval.samples.jsonl`) and lm-eval's own results JSON (`lm_eval.native.json`)."""

from __future__ import annotations

from fp8rl.evaluate.eval_tasks import eval_task_problems
from fp8rl.evaluate.schema import samples_path
from fp8rl.evaluate.suites._harness import all_local, run_harness_suite
from fp8rl.evaluate.suites._registry import EvalSuite, SuiteJob, register_suite


def run(job: SuiteJob) -> None:
    run_harness_suite(job, "lm_eval", job.cfg.eval.lm_eval_tasks, "test.jsonl", keep_samples=True)


SUITE = register_suite(
    EvalSuite(
        name="lm_eval",
        command="lm-eval",
        help="lm-eval tasks of eval.lm_eval_tasks -> eval/lm_eval.json",
        usage="""
Reads the checkpoint (a Hugging Face model folder), the task splits in `--data` and the config's
`eval` section (tasks, `limit`, batch size, generation length, sampling), runs lm-eval offline, and
writes `--out` (one score per task and metric, with its standard error, the number of examples and the
checkpoint's fingerprint), every scored sample beside it (`lm_eval.samples.jsonl`) and lm-eval's own
results JSON (`lm_eval.native.json`). A missing or damaged checkpoint, data file or task, or an `--out`
that cannot be written, exits 2 before any model is loaded. `--on-failure record` writes the tasks
that finished and lists the crashed ones instead of exiting non-zero.

    fp8rl eval lm-eval --config config/smoke.yaml --data results/smoke/data \\
        --checkpoint results/smoke/runs/grpo/tiny/bf16/none/seed0/checkpoint --out /tmp/lm_eval.json
""",
        run=run,
        enabled=lambda cfg: bool(cfg.eval.lm_eval_tasks),
        offline=lambda cfg: all_local("lm_eval", cfg.eval.lm_eval_tasks),
        checks=(eval_task_problems,),
        data="test",
        sections=("numerics", "eval", "backend"),
        role="eval",
        rule="eval_lm",
        records_failures=True,
        extra_outputs=lambda out: [samples_path(out)],
    )
)
