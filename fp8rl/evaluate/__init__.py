"""Evaluation of trained checkpoints: lm-eval tasks and the function-calling (agent) benchmark.

- `eval_tasks`: which tasks a config names and where they come from (task YAMLs under `evals/`, bound to
  the tier's held-out data; lm-eval's own tasks; BFCL categories).
- `lm_eval_runner`: runs lm-eval (`hf` model on the reference backend, `vllm` on verl).
- `tool_calls`: scores a generated function call by its Python syntax tree, never executing it.
- `bfcl`: the paper tier's BFCL categories through `bfcl-eval` in its own environment.
- `schema`: the one result file format of both suites (docs/interfaces.md).

`fp8rl eval lm-eval` / `fp8rl eval agent` (fp8rl/commands/evaluate.py) tie them together.
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
