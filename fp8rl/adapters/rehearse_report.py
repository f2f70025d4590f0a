"""The `report` job on paper-tier runs as the verl path leaves them: a few run folders of the config's
matrix written by the writers the real chain runs, then `fp8rl report --config FILE` over them, and what
it wrote checked. The CI tier's report (fp8rl.adapters.image_rehearse `report_job`) checks the tables'
numbers against published ones; this one checks that the paper config's report builds from what verl,
the import and the eval jobs leave.

`write_runs(cfg, runs_dir, work)` writes the cells of `CELLS` (the matrix's first algorithm and model:
two bf16 seeds, two seeds of `fp8_tis` or the first FP8 variant, at its first granularity) as the chain
writes them:

- training (`fp8rl verl train`): the run folder claimed (`run.json`), each attempt's log written by
  verl's own `FileLogger` (orjson, so a NaN is written as `null`) into `verl_logs/attempt-NNN.jsonl` with
  the metric names verl and fp8rl's loss log, then fp8rl.adapters.verl_run.finish_run with the job
  script's exit code: it imports the logs and writes `metrics.jsonl`, `throughput.json`, `summary.json`;
- `nan`: verl logs a NaN entropy at one step and trains on (the import decides `diverged`);
- `failed`: two attempts, the last of which verl leaves with a non-zero exit before the last step (the
  DAG's last attempt, `--on-failure record`): finish_run records `failed`, and no eval runs;
- evaluation (`eval_lm`, `eval_agent`, runs that ended `ok` or `diverged`): each suite's result file by
  its own writers: lm-eval's `simple_evaluate` output shape through fp8rl.evaluate.schema's
  `normalise_lm_eval`, bfcl-eval's score files through fp8rl.evaluate.bfcl's `read_scores`, both
  written by `write_eval` with the provenance the eval job records (the runs have no checkpoint folder,
  so no checkpoint digest: the export is rehearsed by the `export` job type).

`rehearse` then runs `fp8rl report --config FILE` over them and `fp8rl publish` of that report (the
DAG's next step, which refuses a report missing an output of the config's report flags:
`ReportPaths.for_config`), and `check_tables` reads the published runs.csv, runs.md (each written run
with the status it ended in) and SUMMARY.md; `report_job` runs both commands in the cpu image's venv.
verl must be importable here (`PYTHONPATH=build/verl-site`): its FileLogger writes the logs. bfcl-eval's
score files (its output, which `read_scores` reads) are the one input written here by hand.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import random
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fp8rl.adapters.image_venv import TAIL_CHARS, Result, _run, install_fp8rl, venv_problem
from fp8rl.adapters.rehearsal_stand_ins import write_verl_file_log
from fp8rl.config import ExperimentConfig
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import load_config
from fp8rl.run_files import RunDir
from fp8rl.run_files import runs_dir as tier_runs_dir

JOB = "report (paper-tier runs)"


@dataclass(frozen=True)
class Cell:
    """One rehearsed run of the config's first algorithm and model: `fp8` (the matrix's `FP8_VARIANT`,
    else its first FP8 variant, at its first granularity) or bf16, its `seed` (an index into the matrix's
    seeds) and how it ends: `ok`, `nan` (a NaN entropy logged at step `at`, trained on: the import makes
    it `diverged`) or `failed` (verl exits 1 at step `at` on the last attempt)."""

    fp8: bool
    seed: int
    ends: str = "ok"
    at: int = 0


CELLS = (
    Cell(False, 0),
    Cell(False, 1),
    Cell(True, 0, "nan", at=40),
    Cell(True, 1, "failed", at=37),
)
FP8_VARIANT = "fp8_tis"  # the paper's baseline fix: its TIS metrics go through the import too
# the status `fp8rl report` must list each ending under (runs.md's `status`)
STATUS_OF = {"ok": "ok", "nan": "diverged", "failed": "failed"}


def cell_spec(cfg: ExperimentConfig, cell: Cell) -> RunSpec:
    """The matrix cell `cell` stands for; ValueError when the matrix has no such cell (no FP8 variant,
    fewer than two seeds)."""
    from fp8rl.vocabulary import REFERENCE_VARIANT

    m = cfg.matrix
    fp8 = [v for v in m.variants if v != REFERENCE_VARIANT]
    variant = (
        (FP8_VARIANT if FP8_VARIANT in fp8 else fp8[0] if fp8 else None) if cell.fp8 else REFERENCE_VARIANT
    )
    seed = m.seeds[cell.seed] if cell.seed < len(m.seeds) else None
    for spec in cfg.runs():
        if (spec.algo, spec.model, spec.variant, spec.seed) == (m.algorithms[0], m.models[0], variant, seed):
            return spec  # the first granularity (and condition) of the variant
    raise ValueError(
        f"the matrix has no {variant or 'FP8'} run of {m.algorithms[0]}/{m.models[0]} with its seed number "
        f"{cell.seed + 1} (the report rehearsal needs bf16 and an FP8 variant, two seeds each)"
    )


def _verl_row(spec: RunSpec, step: int, rng: random.Random) -> dict:
    """One step's metrics as verl 0.9.1 logs them (its own names, fp8rl's loss metrics under `actor/`,
    the rollout correction's under `rollout_corr/` for a TIS cell): a slowly rising reward, a steady
    entropy."""
    reward = min(0.9, 0.2 + 0.001 * step) + rng.uniform(-0.02, 0.02)
    row = {
        "critic/score/mean": reward,
        "actor/entropy": 0.5 + rng.uniform(-0.01, 0.01),
        "response_length/mean": 900.0 + rng.uniform(-50, 50),
        "actor/pg_loss": rng.uniform(-0.05, 0.05),
        "actor/grad_norm": 0.3 + rng.uniform(0, 0.1),
        "actor/acc/mean": reward,
        "actor/clip/low_neg": 0.004 + rng.uniform(0, 0.002),
        "actor/clip/high_pos": 0.003 + rng.uniform(0, 0.002),
        "actor/ratio/p50": 1.0,
        "timing_s/gen": 1800.0 + rng.uniform(-60, 60),
        "timing_s/old_log_prob": 300.0,
        "timing_s/update_actor": 1500.0 + rng.uniform(-60, 60),
    }
    if spec.spec.tis:
        row |= {"rollout_corr/kl": 0.001, "rollout_corr/k3_kl": 0.0005,
                "rollout_corr/rollout_is_mean": 1.0, "rollout_corr/rollout_is_ratio_fraction_high": 0.01}  # fmt: skip
    return row


def train_run(cfg: ExperimentConfig, spec: RunSpec, cell: Cell, out: Path) -> dict:
    """The training job's files of one cell (module docstring); returns its summary."""
    from fp8rl.adapters.verl_launch import LOG_DIR
    from fp8rl.adapters.verl_run import finish_run

    run = RunDir(out)
    run.claim(spec.run_id)
    rng = random.Random(f"{spec.run_id}")
    steps = cfg.schedule.steps
    rows = {s: _verl_row(spec, s, rng) for s in range(1, steps + 1)}
    if cell.ends == "nan":
        rows[cell.at]["actor/entropy"] = math.nan
    logs = run.root / LOG_DIR
    if cell.ends == "failed":  # a first attempt killed at its time limit, a second that crashed
        write_verl_file_log(logs / "attempt-001.jsonl", {s: rows[s] for s in range(1, cell.at // 2 + 1)})
        write_verl_file_log(
            logs / "attempt-002.jsonl", {s: rows[s] for s in range(cell.at // 2 - 1, cell.at + 1)}
        )
        return finish_run(cfg, spec, out, exit_code=1)
    write_verl_file_log(logs / "attempt-001.jsonl", rows)
    return finish_run(cfg, spec, out, exit_code=0)


def _lm_eval_raw(tasks: list[str], rng: random.Random) -> dict:
    """`lm_eval.simple_evaluate`'s output for `tasks` (its `results` and `n-samples`): gsm8k with its
    two filters, the others one."""
    results, n_samples = {}, {}
    for task in tasks:
        filters = ("strict-match", "flexible-extract") if task == "gsm8k" else ("none",)
        n = 1319 if task == "gsm8k" else 30 if task.startswith("aime") else 500
        metrics: dict = {"alias": task}
        for filt in filters:
            metrics[f"exact_match,{filt}"] = round(rng.uniform(0.3, 0.9), 4)
            metrics[f"exact_match_stderr,{filt}"] = 0.01
        results[task] = metrics
        n_samples[task] = {"original": n, "effective": n}
    return {"results": results, "n-samples": n_samples}


def _bfcl_scores(root: Path, names: list[str], rng: random.Random) -> None:
    """bfcl-eval's score files (`BFCL_v3_{category}_score.json`, a header line first) for `names`."""
    from fp8rl.evaluate.bfcl import BFCL_CATEGORIES

    for name in names:
        cat = BFCL_CATEGORIES[name]
        path = root / "model" / f"BFCL_v3_{cat}_score.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        head = {"accuracy": round(rng.uniform(0.4, 0.9), 4), "correct_count": 0, "total_count": 200}
        path.write_text(json.dumps(head) + "\n")


def eval_run(cfg: ExperimentConfig, spec: RunSpec, out: Path, work: Path) -> list[Path]:
    """Each enabled harness suite's result file of a finished run, through the suite's own writers
    (module docstring); returns the files."""
    from fp8rl.evaluate.bfcl import read_scores
    from fp8rl.evaluate.eval_tasks import BFCL_PREFIX
    from fp8rl.evaluate.schema import normalise_lm_eval, write_eval
    from fp8rl.provenance import provenance

    run = RunDir(out)
    rng = random.Random(f"eval {spec.run_id}")
    written = []
    if cfg.eval.lm_eval_tasks:
        results = normalise_lm_eval(_lm_eval_raw(list(cfg.eval.lm_eval_tasks), rng))
        prov = provenance(config_digest=cfg.digest())
        written.append(write_eval(run.eval_file("lm_eval"), run.checkpoint, "lm_eval", results, prov))
    if cfg.eval.agent:  # BFCL categories, named `bfcl_{category}` in the config (as the harness plans them)
        scores = work / "bfcl-scores" / spec.run_id
        categories = [name.removeprefix(BFCL_PREFIX) for name in cfg.eval.agent]
        _bfcl_scores(scores, categories, rng)
        results = read_scores(scores, categories)
        prov = provenance(config_digest=cfg.digest())
        written.append(write_eval(run.eval_file("agent"), run.checkpoint, "agent", results, prov))
    return written


def write_runs(cfg: ExperimentConfig, runs_dir: Path, work: Path) -> dict[str, str]:
    """The run folders of `CELLS` under `runs_dir` (module docstring); returns run id -> the status the
    report must list it under. RuntimeError when a run's summary is not the status its ending makes."""
    expected = {}
    for cell in CELLS:
        spec = cell_spec(cfg, cell)
        out = RunDir.of(runs_dir, spec.run_id).root
        summary = train_run(cfg, spec, cell, out)
        want = STATUS_OF[cell.ends]
        if summary["status"] != want:
            raise RuntimeError(
                f"{spec.run_id}: the train job recorded {summary['status']!r} ({summary['reason']}), "
                f"not {want!r} ({cell.ends})"
            )
        if want in ("ok", "diverged"):
            eval_run(cfg, spec, out, work)
        expected[spec.run_id] = want
    return expected


def check_tables(report: Path, expected: dict[str, str]) -> list[str]:
    """What is wrong with the report in the folder `report` (empty: nothing), read by its file names
    (docs/interfaces.md): runs.csv without a run of `expected` or listing it with another status, runs.md
    without a line naming it with that status, SUMMARY.md missing or empty."""
    runs_csv, runs_md, summary = (
        report / "tables" / "runs.csv",
        report / "tables" / "runs.md",
        report / "SUMMARY.md",
    )
    problems = [f"{p}: not written" for p in (runs_csv, runs_md, summary) if not p.is_file()]
    if problems:
        return problems
    with open(runs_csv, newline="") as fh:
        listed = {r["run_id"]: r for r in csv.DictReader(fh)}
    md = runs_md.read_text().splitlines()
    for run_id, status in expected.items():
        row = listed.get(run_id)
        if row is None:
            problems.append(f"{runs_csv}: {run_id} not listed")
        elif row.get("status") != status:
            problems.append(f"{runs_csv}: {run_id} listed as {row.get('status')!r}, not {status!r}")
        if not any(run_id in line and f"| {status} " in line for line in md):
            problems.append(f"{runs_md}: no line lists {run_id} as {status}")
    if not summary.read_text().strip():
        problems.append(f"{summary}: empty")
    return problems


Fp8rl = Callable[[list[str]], subprocess.CompletedProcess]


def rehearse(config: Path, sets: list[str], work: Path, fp8rl: Fp8rl) -> Result:
    """The report rehearsal in `work`: the runs of `CELLS` of `config` (with `sets`) under
    `work/results_paper` (`write_runs`), then `fp8rl(["report", "--config", FILE, "--set", ...])` over
    them, `fp8rl publish` of that report into `work/published` (which checks that every output of the
    config's report flags is there and of one report: fp8rl.publication.publish) and the published tables
    (`check_tables`). `fp8rl` runs the fp8rl command line (the cpu image's venv in `report_job`)."""
    import shutil

    config = Path(config)
    results, published = work / "results_paper", work / "published"
    for old in (results, published):
        shutil.rmtree(old, ignore_errors=True)
    sets = [*sets, f"results_dir={results}"]
    cfg = load_config(config, sets)
    try:
        expected = write_runs(cfg, tier_runs_dir(cfg.results_dir, cfg.tier), work)
    except (RuntimeError, ValueError) as exc:
        return Result(JOB, False, f"writing the {cfg.tier} tier's runs: {exc}")
    given = ["--config", str(config), *(a for s in sets for a in ("--set", s))]
    for argv in (["report", *given], ["publish", *given, "--out", str(published)]):
        res = fp8rl(argv)
        if res.returncode != 0:
            out = (res.stdout + res.stderr)[-TAIL_CHARS:]
            return Result(
                JOB, False, f"fp8rl {argv[0]} --config {config.name} exited {res.returncode}:\n{out}"
            )
    if problems := check_tables(published, expected):
        return Result(JOB, False, "; ".join(problems[:10]))
    ends = ", ".join(f"{run_id} {status}" for run_id, status in expected.items())
    return Result(
        JOB, True, f"fp8rl report --config {config.name} over {ends} (verl's FileLogger, the import, the "
        "eval writers): published complete, runs.md and SUMMARY.md as they ended",
    )  # fmt: skip


def report_job(venv: Path, work: Path, config: Path, sets: list[str], timeout_s: int = 1800) -> Result:
    """`rehearse` with the report run in the cpu image's packages (`venv`, this working tree's fp8rl
    installed into it: `install_fp8rl`), as the DAG's report job runs it; skipped while the venv is not
    built or verl is not importable here (its FileLogger writes the logs)."""
    if problem := venv_problem(venv, "cpu"):
        return Result(JOB, True, problem, skipped=True)
    if importlib.util.find_spec("verl") is None:
        return Result(JOB, True, "verl is not importable here (PYTHONPATH=build/verl-site)", skipped=True)
    install_fp8rl(venv)
    work.mkdir(parents=True, exist_ok=True)

    def fp8rl(argv: list[str]) -> subprocess.CompletedProcess:
        return _run(venv, "cpu", [str(venv / "bin" / "fp8rl"), *argv], work, timeout_s)

    return rehearse(config, sets, work, fp8rl)
