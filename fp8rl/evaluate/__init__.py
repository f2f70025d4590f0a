"""Evaluation of trained checkpoints: the evaluation suites (lm-eval tasks, the function-calling (agent)
benchmark, the held-out bf16 endpoint, ...) and what they share.

- `suites`: the suite registry, one module per suite (how it scores a checkpoint, what it needs of the
  DAG); the CLI, the result files and the DAG's evaluation rules come from it.
- `eval_tasks`: which tasks a config names and where they come from (task YAMLs under `evals/`, bound to
  the tier's held-out data; lm-eval's own tasks; BFCL categories).
- `lm_eval_runner`: runs lm-eval (`hf` model on the reference backend, `vllm` on verl).
- `tool_calls`: scores a generated function call by its Python syntax tree, never executing it.
- `bfcl`: the paper tier's BFCL categories through `bfcl-eval` in its own environment.
- `schema`: the one result file format of every suite (docs/interfaces.md).

`fp8rl eval <suite>` and `fp8rl eval run` (fp8rl/commands/evaluate.py) run the registered suites.
"""

from fp8rl.evaluate.eval_tasks import EvalInputError, TaskPlan, plan_tasks
from fp8rl.evaluate.schema import SUITES, TaskResult, normalise_lm_eval, write_eval
from fp8rl.evaluate.tool_calls import CallScore, load_tools, parse_call, score_response

__all__ = [
    "SUITES",
    "CallScore",
    "EvalInputError",
    "TaskPlan",
    "TaskResult",
    "load_tools",
    "normalise_lm_eval",
    "parse_call",
    "plan_tasks",
    "score_response",
    "write_eval",
]
