"""Every check of an experiment config beyond its schema, in one list.

What the task needs of the config (fp8rl.engine.tasks, fp8rl.adapters.math_data), what its backend
can run (the verl backend's refusals, fp8rl.adapters.verl_overrides), whether bfcl-eval can prompt
its models (fp8rl.evaluate.bfcl), whether the eval tasks exist (fp8rl.evaluate.eval_tasks) and whether the math evals can be asked in the training format
(fp8rl.evaluate.answer_format). `fp8rl config validate`, the
Snakefile's validation (workflows/common.smk) and the cluster preflight run exactly these, so a config
either fails all of them or none.
"""

from __future__ import annotations

from fp8rl.adapters.math_data import task_problems
from fp8rl.adapters.verl_overrides import verl_problems
from fp8rl.engine.tasks import config_problems
from fp8rl.evaluate.answer_format import answer_format_problems
from fp8rl.evaluate.bfcl import bfcl_problems
from fp8rl.evaluate.eval_tasks import eval_task_problems

CONFIG_CHECKS = (
    config_problems, task_problems, verl_problems, bfcl_problems, answer_format_problems, eval_task_problems
)  # fmt: skip
