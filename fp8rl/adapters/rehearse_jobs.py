"""Every job type of a verl config's DAG rehearsed on this CPU machine (`fp8rl verl rehearse`): each one
run with its real command, in the packages it runs in on the cluster, as far as a CPU allows, and
reported `ok`, `skipped` (with the reason and the command that makes what is missing) or `failed`.

The job types (`JOB_TYPES`, in the order they run; `rules`: the DAG rules each one stands for):

- `fetch` (`fetch_data`, `fetch_model`; the login node, this machine's environment): `fp8rl fetch data`,
  `fp8rl fetch model` for each model of the matrix and `fp8rl data` on the record, against a stand-in hub
  (`$FP8RL_HUB_MIRROR`; fp8rl.adapters.rehearsal_stand_ins `stand_in_hub`): to their end. What they
  write is the input of the data and eval job types, which make it themselves when `fetch` is not
  selected.
- `train` (`train`): each job type's verl job script to its first GPU point and the steps a CPU can run
  past it (fp8rl.adapters.verl_rehearse; verl importable here, e.g. `PYTHONPATH=build/verl-site`).
- `data` (`data`; train image), `export` (the train job script's last command; train image), `eval-lm`
  (`eval_lm`; eval image), `eval-agent` (`eval_agent`; bfcl image), `report` (`report`; cpu image): the
  job in its image's pinned packages (fp8rl.adapters.image_rehearse, image_rehearse_agent), each
  skipped while its image's venv is not built (`make image-venvs IMAGE_VENVS=IMAGE`). The report job
  runs twice: on the CI tier's finished runs (`results/ci`), the one tier whose tables it can check
  against published ones, and with the config itself on a few of its runs written as the verl path
  leaves them (verl's FileLogger, the import, a NaN, a run failed for good, the eval writers:
  fp8rl.adapters.rehearse_report), where it must build every output its report flags list.
- `containers` (`container_image`, `container_sif`): not rehearsed (Docker and apptainer build the
  images); the other job types run in each image's locked packages instead.

A job type that does not apply to the config (no eval suite of its kind, no containers) is left out
(`planned`); tests/integration/test_rehearse_job_types.py checks that the paper tier's DAG has no rule
that no job type stands for.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fp8rl.adapters import image_rehearse, image_rehearse_agent, rehearse_report
from fp8rl.adapters.image_venv import ROOT, TAIL_CHARS, Result
from fp8rl.adapters.rehearsal_stand_ins import (
    HUB_SHAPES,
    model_family,
    stand_in_checkpoint,
    stand_in_hub,
    stand_in_model,
)
from fp8rl.config import ExperimentConfig
from fp8rl.config.runs import RunSpec

# what the data and eval jobs get on top of the user's --set: the stand-in hub's cache, and splits small
# enough for its 12 problems
STAND_IN_SETS = ("task.n_test=3", "task.n_train=100")
VERL_SITE_HINT = "scripts/verl_test_env.sh builds build/verl-site; run with PYTHONPATH=build/verl-site"


@dataclass(frozen=True)
class Outcome:
    """How one job type's rehearsal ended: `status` ok, skipped or failed, and what it found."""

    job: str
    status: str
    detail: str

    def line(self) -> str:
        return f"{self.job}: {self.status} ({self.detail})"


@dataclass
class Context:
    """What every job type's rehearsal reads: the config (its file and `--set`s), the working folder,
    the user's `--base`/`--data`, the train job types to run, and `echo` for progress lines. `inputs`
    holds what `hub_inputs` made once."""

    cfg: ExperimentConfig
    config_file: Path
    sets: list[str]
    work: Path
    specs: list[RunSpec]
    base: Path | None = None
    data: Path | None = None
    overrides: list[str] = field(default_factory=list)
    timeout_s: int = 900
    echo: Callable[[str], None] = print
    inputs: dict = field(default_factory=dict)

    def job_sets(self) -> list[str]:
        """The `--set`s of the data and eval jobs: the user's, then the stand-in hub's cache and sizes."""
        return [*self.sets, f"hub.home={self.work / 'hf_home'}", *STAND_IN_SETS]

    def model_base(self) -> Path:
        """`--base`, else a stand-in of the first train job's model (its family and attention shape)."""
        if self.base is not None:
            return self.base
        name = self.specs[0].model
        hf_id = self.cfg.model(name).hf_id or name
        path = self.work / f"stand-in-{name}"
        if (path / "config.json").is_file():
            return path
        return stand_in_model(path, model_family(hf_id), HUB_SHAPES.get(hf_id))


def _fp8rl(ctx: Context, *argv: str) -> subprocess.CompletedProcess:
    """`fp8rl ARGV --config FILE --set ...` on this machine, reading the stand-in hub."""
    from fp8rl.adapters.hub import MIRROR_ENV

    sets = [a for s in ctx.job_sets() for a in ("--set", s)]
    env = {**os.environ, MIRROR_ENV: str(ctx.inputs["mirror"])}
    cmd = [sys.executable, "-m", "fp8rl.cli", *argv, "--config", str(ctx.config_file), *sets]
    return subprocess.run(cmd, cwd=ctx.work, env=env, capture_output=True, text=True, timeout=ctx.timeout_s)


def hub_inputs(ctx: Context) -> tuple[Path, Path]:
    """The stand-in hub, the record `fp8rl fetch data` writes from it and the data folder `fp8rl data`
    writes from that record: `(record, data folder)`, made once per context; RuntimeError naming the
    command that failed."""
    if "data" not in ctx.inputs:
        models = tuple(dict.fromkeys(ctx.cfg.model(m).hf_id for m in ctx.cfg.matrix.models))
        mirror = ctx.work / "stand-in-hub"
        if not mirror.is_dir():
            stand_in_hub(mirror, models=tuple(m for m in models if m))
        ctx.inputs["mirror"] = mirror
        data = ctx.work / "data"
        record = data / "hub.json"
        for argv in (
            ("fetch", "data", "--out", str(record)),
            ("data", "--out", str(data), "--hub", str(record)),
        ):
            res = _fp8rl(ctx, *argv)
            if res.returncode != 0:
                tail = (res.stdout + res.stderr)[-TAIL_CHARS:]
                raise RuntimeError(f"fp8rl {' '.join(argv[:2])} exited {res.returncode}:\n{tail}")
        ctx.inputs["data"] = (record, data)
    return ctx.inputs["data"]


def _from_result(job: str, result: Result) -> Outcome:
    status = "skipped" if result.skipped else "ok" if result.ok else "failed"
    return Outcome(job, status, result.detail)


def _venv(image: str) -> Path:
    return ROOT / "build" / f"venv-{image}"


# ---------------------------------------------------------------------------------------- job types


def fetch_job(ctx: Context) -> Outcome:
    """`fetch`: the hub record and data folder (`hub_inputs`), then `fp8rl fetch model` per model."""
    record, data = hub_inputs(ctx)
    fetched = []
    for name in dict.fromkeys(ctx.cfg.matrix.models):
        if ctx.cfg.model(name).source != "hf":
            continue
        out = ctx.work / "base" / name / "model.json"
        res = _fp8rl(ctx, "fetch", "model", "--model", name, "--out", str(out))
        if res.returncode != 0:
            tail = (res.stdout + res.stderr)[-TAIL_CHARS:]
            return Outcome(
                "fetch", "failed", f"fp8rl fetch model --model {name} exited {res.returncode}:\n{tail}"
            )
        fetched.append(name)
    splits = sorted(p.name for p in data.glob("*.jsonl"))
    return Outcome(
        "fetch", "ok", f"from a stand-in hub: {record.name}, the splits {splits}, the models {fetched}"
    )


def train_job(ctx: Context) -> Outcome:
    """`train`: each train job type through fp8rl.adapters.verl_rehearse, a line per job as it ends."""
    if importlib.util.find_spec("verl") is None:
        return Outcome("train", "skipped", f"verl is not importable here ({VERL_SITE_HINT})")
    from fp8rl.adapters.verl_rehearse import rehearse_run

    failed = []
    for i, spec in enumerate(ctx.specs, 1):
        ctx.echo(f"  [{i}/{len(ctx.specs)}] {spec.run_id} ...")
        result = rehearse_run(
            ctx.cfg, spec, ctx.work, base=ctx.base, data=ctx.data, extra_overrides=ctx.overrides,
            timeout_s=ctx.timeout_s,
        )  # fmt: skip
        ctx.echo(result.line())
        if not result.ok:
            failed.append(spec.run_id)
    n = len(ctx.specs)
    what = f"{n - len(failed)} of {n} jobs reached their first GPU point and passed the steps after it"
    return Outcome(
        "train", "failed" if failed else "ok", what + (f"; failed: {', '.join(failed)}" if failed else "")
    )


def data_job(ctx: Context) -> Outcome:
    """`data`: the data job in the train image's packages, on the fetched record."""
    record, _ = hub_inputs(ctx)
    result = image_rehearse.data_job(
        _venv("train"), _work(ctx, "data"), record, ctx.job_sets(), config=ctx.config_file
    )
    return _from_result("data", result)


def export_job(ctx: Context) -> Outcome:
    """`export`: the train job script's export in the train image's packages, read by transformers 4."""
    tf4 = ROOT / "build" / "tf4-venv" / "bin" / "python"
    return _from_result(
        "export", image_rehearse.export_job(_venv("train"), _work(ctx, "export"), ctx.model_base(), tf4)
    )


def _eval_checkpoint(ctx: Context) -> Path:
    """A checkpoint in its run's folder (whose summary names the run, as the agent eval reads it)."""
    import json

    from fp8rl.run_files import RunDir

    spec = ctx.specs[0]
    run = RunDir(ctx.work / "runs" / spec.run_id)
    checkpoint = stand_in_checkpoint(run.checkpoint, ctx.model_base())
    run.summary.write_text(json.dumps({"run_id": spec.run_id}))
    return checkpoint


def _eval_job(ctx: Context, job: str, image: str, run) -> Outcome:
    """An eval job type: `run` (an image rehearsal's job function) in `image`'s venv on the rehearsal's
    checkpoint and eval data."""
    _, data = hub_inputs(ctx)
    result = run(
        _venv(image), _work(ctx, job), _eval_checkpoint(ctx), data, ctx.job_sets(), config=ctx.config_file
    )
    return _from_result(job, result)


def eval_lm_job(ctx: Context) -> Outcome:
    """`eval-lm`: the lm-eval job in the eval image's packages, to vLLM's GPU."""
    return _eval_job(ctx, "eval-lm", "eval", image_rehearse.eval_lm_job)


def eval_agent_job(ctx: Context) -> Outcome:
    """`eval-agent`: the agent eval in the bfcl image's packages, to vLLM's GPU and past it."""
    return _eval_job(ctx, "eval-agent", "bfcl", image_rehearse_agent.eval_agent_job)


def report_job(ctx: Context) -> Outcome:
    """`report`: in the cpu image's packages, the CI tier's report against its published tables, then the
    config's report over its runs as the verl path leaves them (fp8rl.adapters.rehearse_report): failed
    when either fails, skipped when both are (each one's detail)."""
    results = [
        image_rehearse.report_job(_venv("cpu"), _work(ctx, "report")),
        rehearse_report.report_job(_venv("cpu"), _work(ctx, "report-paper"), ctx.config_file, ctx.sets),
    ]
    for result in results:
        ctx.echo("  " + result.line())
    status = (
        "failed" if any(not r.ok for r in results)
        else "skipped" if all(r.skipped for r in results) else "ok"
    )  # fmt: skip
    return Outcome("report", status, "; ".join(f"{r.job}: {r.detail}" for r in results))


def containers_job(ctx: Context) -> Outcome:
    """`containers`: not rehearsed (module docstring)."""
    return Outcome(
        "containers",
        "skipped",
        "not rehearsed: `fp8rl containers build|sif` builds the images with Docker and apptainer; the other "
        "job types run in each image's locked packages instead (make image-venvs)",
    )


def _work(ctx: Context, job: str) -> Path:
    path = ctx.work / "images" / job
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class JobType:
    """One job type: its `name` (`--jobs`), the DAG `rules` it stands for, the `image` whose packages it
    runs in (None: this machine's), what it checks (`summary`, for --help), its runner, and whether the
    config's DAG has it (`applies`)."""

    name: str
    rules: tuple[str, ...]
    image: str | None
    summary: str
    run: Callable[[Context], Outcome]
    applies: Callable[[ExperimentConfig], bool] = lambda cfg: True


def _hf_models(cfg: ExperimentConfig) -> bool:
    return any(cfg.model(m).source == "hf" for m in cfg.matrix.models)


JOB_TYPES: dict[str, JobType] = {
    j.name: j
    for j in (
        JobType("fetch", ("fetch_data", "fetch_model"), None, "fetch data and models, write the splits "
                "(stand-in hub) to their end", fetch_job, _hf_models),
        JobType("train", ("train",), None, "each job script to verl's first GPU request, then verl's DP "
                "update, metric import, tokenizer export and a resumed chain on CPU", train_job),
        JobType("data", ("data",), "train", "the splits in the train image's packages equal this "
                "machine's", data_job),
        JobType("export", ("train",), "train", "the job script's export, loaded by the bfcl image's "
                "transformers", export_job),
        JobType("eval-lm", ("eval_lm",), "eval", "lm-eval's tasks and the vLLM model built, to vLLM's GPU",
                eval_lm_job, lambda cfg: bool(cfg.eval.lm_eval_tasks)),
        JobType("eval-agent", ("eval_agent",), "bfcl", "bfcl-eval loads the checkpoint, to vLLM's GPU; then "
                "to its end with vLLM's server stood in", eval_agent_job, lambda cfg: bool(cfg.eval.agent)),
        JobType("report", ("report",), "cpu", "the CI tier's report equals its published tables; the "
                "config's report builds on its runs as verl, the import and the evals leave them", report_job),
        JobType("containers", ("container_image", "container_sif"), None, "not rehearsed (Docker, "
                "apptainer)", containers_job, lambda cfg: cfg.containers.mode != "none"),
    )
}  # fmt: skip


def planned(cfg: ExperimentConfig) -> list[JobType]:
    """The job types of `cfg`'s DAG, in the order they run."""
    return [j for j in JOB_TYPES.values() if j.applies(cfg)]


def rehearse_jobs(ctx: Context, names: list[str]) -> list[Outcome]:
    """Run the job types `names` (of `JOB_TYPES`, in its order), each one's outcome echoed as it ends; a
    job type that raises fails with the error, and the others still run."""
    outcomes = []
    for job in (j for j in JOB_TYPES.values() if j.name in names):
        where = f"in the {job.image} image's packages" if job.image else "on this machine"
        ctx.echo(f"[{job.name}] {job.summary} ({where}) ...")
        try:
            outcome = job.run(ctx)
        except Exception as exc:  # noqa: BLE001  (reported as the job type's failure)
            outcome = Outcome(job.name, "failed", f"{type(exc).__name__}: {exc}")
        ctx.echo(outcome.line())
        outcomes.append(outcome)
    return outcomes
