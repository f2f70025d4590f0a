"""The evaluation-suite registry: each suite is one module of this package that registers one `EvalSuite`
under its name (the module's own name; vocabulary `EVAL_SUITES` lists them all), as the mismatch
corrections register themselves in fp8rl.rl.corrections. The command line (`fp8rl eval <suite>`,
`fp8rl eval run`), the DAG's evaluation rules (workflows/eval.smk), the result files
(`eval/<suite>.json`, fp8rl.run_files) and the schema's `suite` field all come from here, so none of
them grows a list or an if/elif per suite.

A suite says what it needs of the DAG (the data it reads, the config sections its result depends on,
the container role it runs in on the cluster, whether each base is scored too) and how it scores one
checkpoint: `run(job)` writes `job.out` (fp8rl.evaluate.schema) and prints its scores.
Nothing here imports torch or a harness: the Snakefile reads the registry while it plans, and a suite's
`run` imports what it needs when it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from fp8rl.vocabulary import EVAL_SUITES

# The data rule's outputs (workflows/data.smk) a suite may read.
DATA_OUTPUTS = ("train", "test", "tool")
# `fp8rl eval run` runs several suites; no suite may take its name.
RESERVED_COMMANDS = ("run",)


@dataclass(frozen=True)
class SuiteJob:
    """One suite's work on one checkpoint: the loaded config, the checkpoint folder, the tier's data
    folder, the result file to write, what a crashed harness does (`raise` or `record`) and the suite's
    parsed options (`EvalSuite.options`)."""

    cfg: Any
    checkpoint: Path
    data: Path
    out: Path
    on_failure: str = "raise"
    options: BaseModel | None = None


@dataclass(frozen=True)
class EvalSuite:
    """A registered evaluation suite.

    - `name`: the result file `eval/<name>.json` and the schema's `suite`;
    - `command`, `help`, `usage`: `fp8rl eval <command>` and its --help (what it reads and writes);
    - `run(job)`: scores `job.checkpoint`, writes `job.out` and prints the scores; bad input found before any model is loaded raises fp8rl.evaluate.eval_tasks.EvalInputError;
    - `enabled(cfg)`: whether a config asks for the suite; by default, whether `eval.suites` names it
      (the shipped suites have keys of their own: `eval.lm_eval_tasks`, `eval.agent`, `eval.heldout`);
    - `options`: the pydantic model of its options under `eval.suites.<name>` (checked when the config
      loads; the job gets them parsed as `SuiteJob.options`), None for a suite that takes none;
    - `offline(cfg)`: whether it reads nothing from the hub for that config (when every suite of a
      process says so, the process runs with the hub offline: HF_DATASETS_OFFLINE, HF_HUB_OFFLINE);
    - `checks`: config checks (`load_config(checks=...)`) its config keys need beyond the schema;
    - `data`: the data rule's output it reads (`train`, `test` or `tool`);
    - `sections`: the config sections its result depends on (its rerun trigger in the DAG);
    - `role`: the container role it runs in on the cluster (fp8rl.containers.ROLE_IMAGES);
    - `rule`: its Snakemake rule where it runs in a job of its own;
    - `records_failures`: `--on-failure record` on the DAG's last attempt (a crashed harness is listed
      in the result instead of failing the job), and the rule retries per `resources.eval.retries`;
    - `extra_outputs(out)`: files written beside `out` that the DAG declares as outputs;
    - `per_base`: the DAG scores every base the runs start from too (`base/{base}/eval/<name>.json`).
    """

    name: str
    command: str
    help: str
    usage: str
    run: Callable[[SuiteJob], None]
    data: str
    sections: tuple[str, ...]
    role: str
    rule: str
    enabled: Callable[[Any], bool] | None = None
    options: type[BaseModel] | None = None
    offline: Callable[[Any], bool] = field(default=lambda cfg: True)
    checks: tuple[Callable, ...] = ()
    records_failures: bool = False
    extra_outputs: Callable[[Path], list[Path]] = field(default=lambda out: [])
    per_base: bool = False

    def is_enabled(self, cfg: Any) -> bool:
        """Whether `cfg` asks for this suite (`enabled`, or its name in `eval.suites`)."""
        return self.enabled(cfg) if self.enabled is not None else self.name in cfg.eval.suites

    def parse_options(self, cfg: Any) -> BaseModel | None:
        """Its options of `eval.suites.<name>` in `cfg`, parsed (pydantic.ValidationError if bad)."""
        if self.options is None:
            return None
        return self.options.model_validate(cfg.eval.suites.get(self.name, {}))


REGISTRY: dict[str, EvalSuite] = {}


def register_suite(suite: EvalSuite) -> EvalSuite:
    """Register `suite` under its name (the module's own name for a new suite, which vocabulary
    `EVAL_SUITES` then holds); ValueError for an unknown or twice-registered name, a data input the
    data rule does not make, or a command another suite (or `fp8rl eval run`) has."""
    where = "register_suite"
    if suite.name not in EVAL_SUITES:
        raise ValueError(
            f"{where}: {suite.name!r} is not in fp8rl.vocabulary.EVAL_SUITES; a suite module registers its "
            "own file's name (fp8rl/evaluate/suites/<name>.py)"
        )
    if suite.name in REGISTRY:
        raise ValueError(f"{where}: {suite.name!r} is registered twice")
    if suite.data not in DATA_OUTPUTS:
        raise ValueError(f"{where}: {suite.name!r}: data {suite.data!r}; allowed: {', '.join(DATA_OUTPUTS)}")
    taken = {s.command: s.name for s in REGISTRY.values()} | dict.fromkeys(RESERVED_COMMANDS, "fp8rl eval")
    if suite.command in taken:
        raise ValueError(
            f"{where}: {suite.name!r}: command {suite.command!r} is taken by {taken[suite.command]}"
        )
    REGISTRY[suite.name] = suite
    return suite


def get_suite(name: str) -> EvalSuite:
    """The registered suite `name`; ValueError naming the registered ones otherwise."""
    if name not in REGISTRY:
        raise ValueError(f"unknown eval suite {name!r}; allowed: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def enabled_suites(cfg: Any) -> list[EvalSuite]:
    """The suites `cfg` asks for, in vocabulary order."""
    return [REGISTRY[name] for name in EVAL_SUITES if REGISTRY[name].is_enabled(cfg)]


def suite_problems(cfg: Any) -> list[tuple[tuple, str]]:
    """A config check (`load_config(checks=...)`): every name in `eval.suites` is a registered suite
    turned on there (not one with a key of its own), and its options are what the suite takes."""
    out = []
    allowed = [s.name for s in REGISTRY.values() if s.enabled is None]
    for name, opts in cfg.eval.suites.items():
        where = ("eval", "suites", name)
        suite = REGISTRY.get(name)
        if suite is None or suite.enabled is not None:
            out.append((where, f"unknown eval suite {name!r}; allowed: {', '.join(allowed) or 'none'}"))
        elif suite.options is None and opts:
            out.append((where, f"suite {name!r} takes no options"))
        elif suite.options is not None:
            try:
                suite.options.model_validate(opts)
            except ValidationError as exc:
                errors = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                out.append((where, errors))
    return out


@dataclass(frozen=True)
class EvalJob:
    """One DAG job kind that evaluates a run: its rule and the suites it runs in one process."""

    rule: str
    suites: tuple[EvalSuite, ...]

    @property
    def role(self) -> str:
        return self.suites[0].role

    @property
    def records_failures(self) -> bool:
        """Whether a suite of the job records a crashed harness on the job's last attempt."""
        return any(s.records_failures for s in self.suites)

    @property
    def sections(self) -> tuple[str, ...]:
        """The config sections any of its suites depends on, each once, in first-seen order."""
        return tuple(dict.fromkeys(s for suite in self.suites for s in suite.sections))


# The job that runs every suite of a run in one process.
ONE_PROCESS_RULE = "eval"


def eval_jobs(cfg: Any, image_of: Callable[[str], str]) -> list[EvalJob]:
    """The DAG's evaluation jobs per run: the enabled suites grouped by the image they run in
    (`image_of(role)`: the shell prefix that enters it, "" on the host). On the host (containers off)
    that is one job, rule `eval`, so a run pays one process start and one set of imports for all its
    suites; with images (the cluster path) each image is a job of its own, a suite alone in its image
    keeping its own rule (`eval_lm`, `eval_agent`, ...)."""
    groups: dict[str, list[EvalSuite]] = {}
    for suite in enabled_suites(cfg):
        groups.setdefault(image_of(suite.role), []).append(suite)
    jobs = []
    for prefix, suites in groups.items():
        if not prefix:
            rule = ONE_PROCESS_RULE
        elif len(suites) == 1:
            rule = suites[0].rule
        else:
            rule = f"{ONE_PROCESS_RULE}_{'_'.join(s.name for s in suites)}"
        jobs.append(EvalJob(rule, tuple(suites)))
    return jobs
