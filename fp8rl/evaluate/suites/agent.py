"""`agent`: the function-calling benchmark of `eval.agent` (local task YAMLs under evals/agent/, scored
by parsing each tool call, never running it; BFCL categories on the paper tier) -> `eval/agent.json`."""

from __future__ import annotations

from fp8rl.evaluate.eval_tasks import eval_task_problems
from fp8rl.evaluate.suites._harness import all_local, run_harness_suite
from fp8rl.evaluate.suites._registry import EvalSuite, SuiteJob, register_suite


def run(job: SuiteJob) -> None:
    run_harness_suite(job, "agent", job.cfg.eval.agent, "tool_test.jsonl", keep_samples=False)


SUITE = register_suite(
    EvalSuite(
        name="agent",
        command="agent",
        help="function-calling benchmark of eval.agent -> eval/agent.json",
        usage="""
Reads the checkpoint and the function-calling test split in `--data` (`tool_test.jsonl`; BFCL on the
paper tier), asks the model for a tool call per example and scores the call by parsing it, never by
running it; writes `--out` in the same schema as `eval lm-eval`. Exit codes and `--on-failure` as there.

    fp8rl eval agent --config config/smoke.yaml --data results/smoke/data \\
        --checkpoint results/smoke/runs/grpo/tiny/bf16/none/seed0/checkpoint --out /tmp/agent.json
""",
        run=run,
        enabled=lambda cfg: bool(cfg.eval.agent),
        offline=lambda cfg: all_local("agent", cfg.eval.agent),
        checks=(eval_task_problems,),
        data="tool",
        sections=("numerics", "eval", "backend"),
        role="agent",
        rule="eval_agent",
        records_failures=True,
    )
)
