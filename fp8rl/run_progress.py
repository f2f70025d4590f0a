"""A tier's progress without its results (`fp8rl archive status`): which runs are archived, evaluated,
trained, training or not started, and which bases are built, so a study that spans sessions can be
followed, and its archive kept up, while it runs.

It reads which files exist and how many lines a run's `metrics.jsonl` holds (one per logged step),
never a value: not a metric, not `summary.json` (whose `status` says whether a run diverged), not an eval
score, not the archive manifest's run status. So a pre-registered study can be watched without anyone
seeing an outcome. A finished run shows no step count (a run that stops early would say it diverged).

States, first match wins:

- `archived`: in the tier's run archive (`{results_dir}/published/archive/{tier}/manifest.json`);
- `evaluated`: `summary.json` and the result file of every eval suite the config turns on: what
  `fp8rl archive save` takes;
- `trained`: `summary.json`, an eval result still missing;
- `training`: `metrics.jsonl` exists (its line count is the steps logged so far, of `schedule.steps`);
- `not started`.

A base is `archived` (in the manifest), `built` (its `sft.json`, written last by the SFT, exists) or
`not built`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from fp8rl.config import ExperimentConfig, arm_cell
from fp8rl.config.runs import expand_matrix
from fp8rl.run_archive import Manifest, archive_dir, has_eval_results, tier_dir
from fp8rl.run_files import METRICS_FILE, RUNS_DIR, SFT_RECORD, SUMMARY_FILE

STATES = ("archived", "evaluated", "trained", "training", "not started")
BASE_STATES = ("archived", "built", "not built")


@dataclass(frozen=True)
class RunProgress:
    run_id: str
    arm: str  # the study's arm name, or the run id without its seed
    base: str
    state: str  # one of STATES
    steps: int | None  # steps logged, for a run in training only


@dataclass(frozen=True)
class Progress:
    tier: str
    planned_steps: int
    runs: list[RunProgress]
    bases: dict[str, str]  # base -> one of BASE_STATES

    def counts(self) -> dict[str, int]:
        counted = Counter(r.state for r in self.runs)
        return {state: counted[state] for state in STATES}

    def as_json(self) -> dict:
        return {"tier": self.tier, "planned_steps": self.planned_steps, "counts": self.counts(),
                "runs": [{"run_id": r.run_id, "arm": r.arm, "base": r.base, "state": r.state}
                         | ({} if r.steps is None else {"steps": r.steps}) for r in self.runs],
                "bases": self.bases}  # fmt: skip


def _lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for line in f if line.strip())


def _arm_of(cfg: ExperimentConfig, run_id: str) -> str:
    if cfg.study is not None:
        for name, prefix in cfg.study.arms.items():
            if arm_cell(prefix, run_id):
                return name
    return run_id.rsplit("/", 1)[0]


def tier_progress(cfg: ExperimentConfig, eval_suites: tuple[str, ...]) -> Progress:
    """Every run of the matrix and every base it starts from, in its state (module docstring)."""
    manifest = Manifest.read(archive_dir(cfg), cfg.tier)
    tier = tier_dir(cfg)
    runs, bases = [], {}
    for spec in expand_matrix(cfg):
        base = cfg.base_of(spec.model, spec.seed)
        run = tier / RUNS_DIR / spec.run_id
        steps = None
        if spec.run_id in manifest.runs:
            state = "archived"
        elif (run / SUMMARY_FILE).is_file():
            state = "evaluated" if has_eval_results(run, eval_suites) else "trained"
        elif (run / METRICS_FILE).is_file():
            state, steps = "training", _lines(run / METRICS_FILE)
        else:
            state = "not started"
        runs.append(RunProgress(spec.run_id, _arm_of(cfg, spec.run_id), base, state, steps))
        if base not in bases:
            built = (tier / "base" / base / SFT_RECORD).is_file()
            bases[base] = "archived" if base in manifest.bases else "built" if built else "not built"
    return Progress(cfg.tier, cfg.schedule.steps, runs, bases)


def describe_progress(progress: Progress, config: str = "FILE") -> str:
    """Per arm, how many runs are in each state; the runs in training with their steps; the bases; and
    the totals, with the `fp8rl archive save` command (for `config`) when evaluated runs wait for it.
    States only, no result (module docstring)."""
    arms: dict[str, Counter] = {}
    for r in progress.runs:
        arms.setdefault(r.arm, Counter())[r.state] += 1
    width = max([len("arm"), *(len(a) for a in arms)])
    head = f"{'arm':<{width}}  " + "  ".join(f"{s:>11}" for s in STATES)
    lines = [f"tier {progress.tier}: runs by state (no result is read)", head, "-" * len(head)]
    for arm, counted in arms.items():
        lines.append(f"{arm:<{width}}  " + "  ".join(f"{counted[s]:>11}" for s in STATES))
    total = progress.counts()
    lines.append(f"{'all':<{width}}  " + "  ".join(f"{total[s]:>11}" for s in STATES))
    training = [r for r in progress.runs if r.state == "training"]
    if training:
        lines.append("")
        lines += [f"training: {r.run_id}  step {r.steps}/{progress.planned_steps}" for r in training]
    by_state = Counter(progress.bases.values())
    lines.append("")
    lines.append(
        f"bases: {len(progress.bases)}; "
        + ", ".join(f"{s} {by_state[s]}" for s in BASE_STATES if by_state[s])
        + "".join(f"\n  not built: {b}" for b, s in progress.bases.items() if s == "not built")
    )
    done = total["archived"] + total["evaluated"]
    lines.append(f"{done} of {len(progress.runs)} runs done ({total['archived']} archived)")
    if total["evaluated"]:
        lines.append(
            f"{total['evaluated']} evaluated and not yet archived: fp8rl archive save --config {config}"
        )
    return "\n".join(lines)
