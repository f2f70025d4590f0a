"""Which evaluation tasks a config names, and where each one comes from.

- Local tasks: one lm-eval task YAML per task under `evals/lm_eval/` (suite `lm_eval`) or
  `evals/agent/` (suite `agent`), named like the file (`$FP8RL_EVALS_DIR` replaces `evals/`). Their `dataset_kwargs.data_files` name files of
  the run's data directory (`--data DIR`); they are resolved here, so the task reads the tier's held-out
  split fully offline through the `json` dataset builder.
- lm-eval's own tasks (paper tier): the names of `LM_EVAL_TASKS` (fp8rl.vocabulary: those whose data
  `fp8rl fetch data` snapshots for an offline node), through `LM_EVAL_ALIASES` (`math500` -> lm-eval's
  `minerva_math500`).
- BFCL categories (paper tier): `bfcl_<category>` in `eval.agent`, run by `fp8rl.evaluate.bfcl`.

A name is only ever one of these (`known_tasks`): `eval_task_problems`, one of the config checks, refuses
any other before a job starts, and `plan_tasks` refuses it again, so no config value can make lm-eval
read a YAML (and the Python its `!function` names) from outside the task folder.

Every problem found here (a missing or broken YAML, an unknown key, a missing data file) is an
`EvalInputError` whose message names the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from fp8rl.vocabulary import LM_EVAL_TASKS

EVALS_DIR = Path(__file__).resolve().parents[2] / "evals"
SUITE_DIRS = {"lm_eval": "lm_eval", "agent": "agent"}
LM_EVAL_ALIASES = {"math500": "minerva_math500"}
BFCL_PREFIX = "bfcl_"
# fp8rl's BFCL category names (`bfcl_<category>` in `eval.agent`) -> bfcl-eval (v4) test categories;
# fp8rl.evaluate.bfcl runs them.
BFCL_CATEGORIES = {"simple": "simple_python", "multiple": "multiple", "parallel": "parallel"}


class EvalInputError(ValueError):
    """Bad evaluation input found before any model is loaded: the CLI prints it and exits 2."""


@dataclass
class TaskPlan:
    """What to run for one suite: lm-eval task specs (inline configs or registered names), the name to
    report for each lm-eval task, the YAML each local task came from, and the BFCL categories."""

    lm_eval_specs: list[str | dict]
    report_names: dict[str, str]
    bfcl: list[str]
    sources: dict[str, Path] = field(default_factory=dict)
    # hub dataset id -> its snapshot folder in the shared cache, from the tier's `data/hub.json`
    # (`fp8rl fetch data`): lm-eval's own tasks read their data from there, offline
    dataset_paths: dict[str, str] = field(default_factory=dict)

    @property
    def needs_builtin_tasks(self) -> bool:
        return any(isinstance(s, str) for s in self.lm_eval_specs)


def evals_dir() -> Path:
    """The task folder: `$FP8RL_EVALS_DIR`, else the repository's `evals/`."""
    return Path(os.environ.get("FP8RL_EVALS_DIR") or EVALS_DIR)


def local_task_path(suite: str, name: str, root: Path | None = None) -> Path:
    return (root or evals_dir()) / SUITE_DIRS[suite] / f"{name}.yaml"


def local_tasks(suite: str, root: Path | None = None) -> list[str]:
    """The task YAMLs of one suite's folder, by name (sorted)."""
    folder = (root or evals_dir()) / SUITE_DIRS[suite]
    return sorted(p.stem for p in folder.glob("*.yaml") if p.is_file()) if folder.is_dir() else []


def known_tasks(suite: str, root: Path | None = None) -> list[str]:
    """Every name a config may give in the suite's list: its local task YAMLs, then lm-eval's tasks
    (`LM_EVAL_TASKS`) or the BFCL categories (`bfcl_<category>`)."""
    builtin = list(LM_EVAL_TASKS) if suite == "lm_eval" else [BFCL_PREFIX + c for c in BFCL_CATEGORIES]
    local = local_tasks(suite, root)
    return local + [n for n in builtin if n not in local]


def eval_task_problems(cfg) -> list[tuple[tuple, str]]:
    """A config check (`load_config(checks=...)`): every name in `eval.lm_eval_tasks` and `eval.agent`
    is a task that exists (`known_tasks`), named with the allowed ones."""
    out = []
    for suite, key in (("lm_eval", "lm_eval_tasks"), ("agent", "agent")):
        names = getattr(cfg.eval, key)
        known = known_tasks(suite) if names else []
        for i, name in enumerate(names):
            if name not in known:
                out.append((("eval", key, i), f"unknown task {name!r}; allowed: {', '.join(known)}"))
    return out


def load_task_yaml(path: Path) -> dict[str, Any]:
    """Parse a task YAML the way lm-eval does (`include`, `!function`) and check its keys."""
    import yaml
    from lm_eval.config.task import TaskConfig
    from lm_eval.tasks._yaml_loader import load_yaml

    try:
        cfg = load_yaml(path, resolve_func=True)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise EvalInputError(f"{path}: {where}invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
    except (ImportError, AttributeError, ValueError, OSError) as exc:
        raise EvalInputError(f"{path}: {exc}") from None
    allowed = {f.name for f in fields(TaskConfig)} | {"include", "group", "tag"}
    unknown = sorted(set(cfg) - allowed)
    if unknown:
        raise EvalInputError(
            f"{path}: unknown key {', '.join(unknown)}; allowed keys: {', '.join(sorted(allowed))}"
        )
    if cfg.get("task") != path.stem:
        raise EvalInputError(f"{path}: `task` is {cfg.get('task')!r}, expected the file name {path.stem!r}")
    return cfg


def bind_data_files(cfg: dict, path: Path, data_dir: Path, cache_dir: Path | None) -> dict:
    """Point a local task's `data_files` at the files of `data_dir` (relative names resolve there)."""
    kwargs = dict(cfg.get("dataset_kwargs") or {})
    files = kwargs.get("data_files")
    if cfg.get("dataset_path") != "json" or not isinstance(files, dict) or not files:
        raise EvalInputError(
            f"{path}: a local task needs `dataset_path: json` and `dataset_kwargs.data_files` "
            "(split -> file name in the data directory)"
        )
    bound = {}
    for split, name in files.items():
        file = Path(name) if Path(name).is_absolute() else data_dir / name
        if not file.is_file():
            raise EvalInputError(f"{path}: data file {file} (split {split!r}) not found")
        bound[split] = str(file.resolve())
    kwargs["data_files"] = bound
    if cache_dir is not None:
        kwargs["cache_dir"] = str(cache_dir)
    return {**cfg, "dataset_kwargs": kwargs}


def plan_tasks(
    suite: str,
    names: list[str],
    data_dir: Path,
    *,
    cache_dir: Path | None = None,
    root: Path | None = None,
) -> TaskPlan:
    """Resolve a config's task names for one suite; raises EvalInputError naming the bad file/task."""
    if not names:
        raise EvalInputError(f"eval.{'lm_eval_tasks' if suite == 'lm_eval' else 'agent'}: no tasks to run")
    specs: list[str | dict] = []
    report: dict[str, str] = {}
    bfcl: list[str] = []
    sources: dict[str, Path] = {}
    known = known_tasks(suite, root)
    for name in names:
        if name not in known:
            key = "lm_eval_tasks" if suite == "lm_eval" else "agent"
            raise EvalInputError(f"eval.{key}: unknown task {name!r}; allowed: {', '.join(known)}")
        path = local_task_path(suite, name, root)
        if path.is_file():
            specs.append(bind_data_files(load_task_yaml(path), path, data_dir, cache_dir))
            report[name] = name
            sources[name] = path
        elif suite == "agent":
            bfcl.append(name.removeprefix(BFCL_PREFIX))
        else:
            lm_name = LM_EVAL_ALIASES.get(name, name)
            specs.append(lm_name)
            report[lm_name] = name
    return TaskPlan(specs, report, bfcl, sources, hub_dataset_paths(data_dir))


def hub_dataset_paths(data_dir: Path) -> dict[str, str]:
    """`{repo_id: snapshot folder}` of the datasets `fetch data` recorded in `data_dir/hub.json`; {}
    without one. Offline, `datasets` 5 loads a hub id only from a prepared cache, which nothing builds
    on a compute node; a snapshot folder it reads like any local dataset (its card's `configs`)."""
    record = Path(data_dir) / "hub.json"
    if not record.is_file():
        return {}
    from fp8rl.adapters.hub import read_record

    try:
        return {repo: snap["path"] for repo, snap in read_record(record).get("datasets", {}).items()}
    except ValueError as exc:
        raise EvalInputError(str(exc)) from None
