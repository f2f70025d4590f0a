"""Every check of an experiment config beyond its schema, in one list.

What the task needs of the config (fp8rl.engine.tasks, fp8rl.adapters.math_data), what its backend
can run (the verl backend's refusals, fp8rl.adapters.verl_support), whether bfcl-eval can prompt
its models (fp8rl.evaluate.bfcl), whether the eval tasks exist (fp8rl.evaluate.eval_tasks) and whether the math evals can be asked in the training format
(fp8rl.evaluate.answer_format), and the options of the eval suites `eval.suites` names
(fp8rl.evaluate.suites). `fp8rl config validate`, the
Snakefile's validation (workflows/common.smk) and the cluster preflight run exactly these, so a config
either fails all of them or none.

    python -m fp8rl.validation CONFIG   # login node: these checks, and the FP8 exclusions of each fetched model

is the login node's part of the cluster preflight (`login_problems`; a job's own part is
fp8rl.adapters.preflight).
"""

from __future__ import annotations

import sys
from pathlib import Path

from fp8rl.adapters.hub import read_record
from fp8rl.adapters.math_data import task_problems
from fp8rl.adapters.preflight import exclusion_problems, meta_weight_modules, report
from fp8rl.adapters.verl_support import verl_problems
from fp8rl.config_loader import ConfigError, load_config
from fp8rl.engine.tasks import config_problems
from fp8rl.evaluate.answer_format import answer_format_problems
from fp8rl.evaluate.bfcl import bfcl_problems
from fp8rl.evaluate.eval_tasks import eval_task_problems
from fp8rl.evaluate.suites import suite_problems

CONFIG_CHECKS = (
    config_problems, task_problems, verl_problems, bfcl_problems, answer_format_problems, eval_task_problems,
    suite_problems,
)  # fmt: skip


def login_problems(config: str) -> list[str]:
    """On the login node: the config's checks (as `fp8rl config validate`), the FP8 exclusions against
    each fetched model's real module names, and the overrides' settings that need no GPU."""
    try:
        cfg = load_config(config, checks=CONFIG_CHECKS)
    except ConfigError as exc:
        return [str(exc)]
    out = []
    for name in cfg.matrix.models:
        record = Path(cfg.results_dir) / cfg.tier / "base" / name / "model.json"
        if record.is_file():
            out.extend(
                f"{name}: {p}" for p in exclusion_problems(meta_weight_modules(read_record(record)["path"]))
            )
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m fp8rl.validation CONFIG`: each of `login_problems` as `preflight: ...`; exit 3 if any."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m fp8rl.validation CONFIG", file=sys.stderr)
        return 2
    return report(login_problems(args[0]), "the job stops before starting Ray")


if __name__ == "__main__":
    sys.exit(main())
