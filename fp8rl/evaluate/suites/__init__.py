"""The evaluation suites, one module each, registered by name (`_registry`): `lm_eval` (lm-eval tasks),
`agent` (the function-calling benchmark), `heldout` (the held-out bf16 endpoint), `heldout_history` (that
endpoint at every checkpoint `schedule.keep_every` kept).

Adding a suite is one module here, named after it, that registers an `EvalSuite` under the module's own
name, plus its test (CONTRIBUTING.md): every module of this package is imported below, and
fp8rl.vocabulary finds the new name by the file's name, so `fp8rl eval <command>`, `fp8rl eval run`,
its result file `eval/<name>.json` and the DAG's evaluation jobs take it with no other edit. A module
whose name starts with `_` is a helper, not a suite. At import, each module must have registered its
own name and every name of vocabulary `EVAL_SUITES` must be registered.
"""

from __future__ import annotations

import importlib
import pkgutil

from fp8rl.evaluate.suites._registry import (
    ONE_PROCESS_RULE,
    REGISTRY,
    EvalJob,
    EvalSuite,
    SuiteJob,
    enabled_suites,
    eval_jobs,
    get_suite,
    register_suite,
    suite_problems,
)
from fp8rl.vocabulary import EVAL_SUITES

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

_unregistered = sorted(
    {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")} - set(REGISTRY)
)
if _unregistered:
    raise ImportError(
        f"fp8rl.evaluate.suites: module {_unregistered[0]}.py registers no suite under its own name; a "
        f'suite module calls register_suite(EvalSuite(name="{_unregistered[0]}", ...))'
    )
if set(REGISTRY) != set(EVAL_SUITES):
    raise ImportError(
        f"fp8rl.evaluate.suites: registered {sorted(REGISTRY)}, but vocabulary EVAL_SUITES names "
        f"{sorted(EVAL_SUITES)}"
    )

# In vocabulary order (the shipped suites first), as `fp8rl eval --help` lists them.
_ordered = {name: REGISTRY[name] for name in EVAL_SUITES}
REGISTRY.clear()
REGISTRY.update(_ordered)

__all__ = [
    "ONE_PROCESS_RULE",
    "REGISTRY",
    "EvalJob",
    "EvalSuite",
    "SuiteJob",
    "enabled_suites",
    "eval_jobs",
    "get_suite",
    "register_suite",
    "suite_problems",
]
