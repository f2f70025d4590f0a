"""One verl training run's directory: what `fp8rl verl train` writes before and after verl runs.

Before (`write_run_files`): the data splits as verl's parquet (`verl_data/{split}.parquet`), the loss spec
(`verl_loss.json`; a `calib.reference: run` cell's targets are the bf16 run's clip fractions of each step,
`fp8rl.calibration_targets.reference_targets_by_step`, as the reference trainer reads them), the overrides
with the deviations and the image (`verl_overrides.json`) and the job script (`verl_launch.sh`). Bad input
raises ValueError (AdapterError) before anything is written.

After (`finish_run`): the file-logger logs of every attempt so far (`verl_logs/attempt-NNN.jsonl`, one per
start of the job script: a resubmitted job resumes from verl's checkpoint) are merged into the run's metrics
and sent to the config's trackers (`track_rows`; TensorBoard in `{run}/tb/`), then `throughput.json` and
`summary.json` are written through fp8rl.run_records, with the reference trainer's schema (plus `backend:
verl` and the deviations in the summary). The stability check and a later `*_calib` run's targets read that
merged history.

A run that fails for good still gets its `summary.json` (`failed`), so the report can be built and the DAG
stops resubmitting it: on the DAG's last attempt (`fp8rl verl train --on-failure record`), and when this
attempt failed at the same step with the same reason as the one before (`failed_alike`: resubmitting
would only repeat it). Each attempt's outcome is kept in `verl_attempts.jsonl` for that.

The base model is the directory `--base` names: a Hugging Face model directory, or one holding the
`model.json` record of an `hf` model fetched into the hub cache (its snapshot path), else the model's
`hf_id`. The directory must exist (a missing one is refused, never passed on as a hub id), and a base
that records its model (`sft.json`, `base.json`) must record the run's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from fp8rl.adapters.hub import read_record
from fp8rl.adapters.verl_data import write_parquet
from fp8rl.adapters.verl_launch import DIVERGENCE_FILE, LOG_DIR, LOG_GLOB, OVERRIDES_FILE, render_script
from fp8rl.adapters.verl_metrics import import_logs, import_rows, read_attempt_logs, run_status
from fp8rl.adapters.verl_model import AdapterError
from fp8rl.adapters.verl_overrides import VerlPaths, deviations, loss_spec, verl_overrides
from fp8rl.adapters.verl_sizing import chain_problem, measured_step_minutes
from fp8rl.calibration_targets import reference_targets_by_step
from fp8rl.config import ExperimentConfig
from fp8rl.config.runs import RunSpec
from fp8rl.containers import apptainer_exec, image_env, image_location
from fp8rl.io import atomic_write_json, atomic_write_text
from fp8rl.provenance import provenance
from fp8rl.rl.calibration import centred_window
from fp8rl.run_files import RunDir
from fp8rl.run_records import build_summary, throughput_record
from fp8rl.tracking import TENSORBOARD_DIR, open_trackers

VERL_DATA_DIR = "verl_data"
LOSS_FILE = "verl_loss.json"
SCRIPT_FILE = "verl_launch.sh"
MODEL_RECORD = "model.json"  # written by `fp8rl fetch model` into base/{model}/
SPLITS = ("train", "test")
OUTCOMES_FILE = "verl_attempts.jsonl"  # one line per finished attempt: status, step, reason


# What `fp8rl sft` (sft.json) and `fp8rl model` (base.json) write into a base: each records its model.
BASE_RECORDS = ("sft.json", "base.json")


def check_base_dir(base: Path, model: str) -> None:
    """AdapterError unless `--base` is a directory whose records (BASE_RECORDS) name `model`: a missing
    folder would reach verl as a hub id, and a base written for another model (a scratch model's for
    qwen3-8b) would train that model under this one's name."""
    from fp8rl.io import loads_json

    if not base.is_dir():
        raise AdapterError(f"--base {base}: no such directory (a local path, never taken for a hub id)")
    for name in BASE_RECORDS:
        path = base / name
        if not path.exists():
            continue
        try:
            recorded = loads_json(path.read_bytes()).get("model")
        except (OSError, ValueError, AttributeError) as exc:
            raise AdapterError(f"--base {path}: not a readable base record ({exc})") from None
        if recorded != model:
            raise AdapterError(f"--base {base}: a base of model {recorded!r} ({name}), not of {model!r}")


def verl_paths(cfg: ExperimentConfig, spec: RunSpec, out: str | Path, base: str | Path | None) -> VerlPaths:
    """The paths verl's overrides point at: the base model (module docstring), the parquet splits and
    the run directory (all absolute). ValueError when a `model.json` record's snapshot is missing, or
    when `base` is not a directory of `spec`'s model (`check_base_dir`)."""
    out = Path(out).resolve()
    model = cfg.model(spec.model)
    base = Path(base).resolve() if base else None
    if base:
        check_base_dir(base, spec.model)
    if base and (base / "config.json").is_file():
        model_path = str(base)
    elif base and (base / MODEL_RECORD).is_file():
        model_path = read_record(base / MODEL_RECORD)["path"]
    else:
        model_path = model.hf_id or str(base)
    data = out / VERL_DATA_DIR
    return VerlPaths(model_path, str(data / "train.parquet"), str(data / "test.parquet"), str(out))


def calib_targets(
    cfg: ExperimentConfig, spec: RunSpec, reference: Path | None
) -> dict[int, tuple[float | None, float | None]] | None:
    """The loss's calibration targets for a `*_calib` cell with `calib.reference: run`: the bf16 run's
    clip fractions of each step (`{step: (q, q_high)}`, smoothed over `calib.run_window` steps, as the
    reference trainer reads them: `fp8rl train`); None for
    any other cell (the loss computes its own)."""
    calib = cfg.calib_for(spec.condition) if spec.spec.calib else cfg.calib
    if not (spec.spec.calib and calib.reference.mode == "run"):
        return None
    if reference is None:
        raise AdapterError(
            "calib.reference is 'run': pass --reference RUN_DIR (the matching finished bf16 run)"
        )
    try:
        return centred_window(reference_targets_by_step(reference, calib.population), calib.run_window)
    except ValueError as exc:
        raise AdapterError(f"--reference {exc}") from None


def train_image(cfg: ExperimentConfig) -> str | None:
    """The train image the job script runs verl in (a `.sif` as an absolute path), or None."""
    image = image_location(cfg.containers, cfg.results_dir, "train")
    if image and image.endswith(".sif"):
        image = str(Path(image).resolve())
    return image


def write_run_files(
    cfg: ExperimentConfig,
    spec: RunSpec,
    paths: VerlPaths,
    *,
    data: Path,
    reference: Path | None = None,
    extra_overrides: list[str] | tuple[str, ...] = (),
    host_python: str | None = None,
) -> Path:
    """Write everything verl needs into the run directory `paths.out`; returns the job script's path.
    `host_python` (the rehearsal, fp8rl.adapters.verl_rehearse): the script runs every command with that
    interpreter on this machine instead of in the train image. ValueError (missing split, unusable
    reference) before any file is written."""
    for split in SPLITS:
        if not (data / f"{split}.jsonl").is_file():
            raise AdapterError(f"--data {data}: no {split}.jsonl (run `fp8rl data` first)")
    targets = calib_targets(cfg, spec, reference)
    out = Path(paths.out)
    model = cfg.model(spec.model)
    overrides = verl_overrides(cfg, spec, paths) + list(extra_overrides)
    image = None if host_python else train_image(cfg)

    for split in SPLITS:
        write_parquet(
            data / f"{split}.jsonl", out / VERL_DATA_DIR / f"{split}.parquet", task=cfg.task.name, split=split
        )
    atomic_write_json(out / LOSS_FILE, loss_spec(cfg, spec, targets=targets))
    atomic_write_json(
        out / OVERRIDES_FILE,
        {"run_id": spec.run_id, "overrides": overrides, "deviations": deviations(cfg, spec), "image": image},
    )
    script = out / SCRIPT_FILE
    atomic_write_text(
        script,
        render_script(
            run_id=spec.run_id, overrides=overrides, out=str(out), nodes=model.nodes,
            gpus_per_node=model.gpus_per_node, prefix=apptainer_exec(cfg, image) if image else "",
            env=image_env(cfg) if cfg.containers.mode != "none" else {}, python=host_python or "python3",
            runtime_min=cfg.resources_for("train").runtime, steps=cfg.schedule.steps,
            tokenizer=paths.model if Path(paths.model).is_dir() else None,
        ),
    )  # fmt: skip
    return script


def run_script(script: Path) -> int:
    """Run the job script (Ray across the allocation, verl, the HF checkpoint); returns its exit code."""
    return subprocess.run(["bash", str(script)], check=False).returncode


def throughput(rows: list[dict], fp8: bool) -> dict:
    """`throughput.json` of a verl run: phase seconds from verl's timings, on CUDA, FP8 through
    Transformer Engine (peak memory, threads and GEMM counts are not known here, so absent)."""
    return throughput_record(
        rows, emulated=False, device="cuda", fp8_backend="transformer_engine" if fp8 else "none"
    )


def _container_id(cfg: ExperimentConfig, image: str | None) -> str | None:
    """The train image's id as the container rule recorded it (`{results_dir}/containers/train.json`)."""
    record = Path(cfg.results_dir) / "containers" / "train.json"
    if image and record.is_file():
        return json.loads(record.read_text()).get("id")
    return None


def track_rows(cfg: ExperimentConfig, spec: RunSpec, out: Path, rows: list[dict]) -> None:
    """Send the imported rows, under fp8rl's metric names, to the config's trackers (TensorBoard in
    `{run}/tb/`, as the reference trainer): the same curves for both backends. verl's own logger shows
    them live under verl's names (`verl_overrides`); these are written when verl has finished, and
    replace the event files of an earlier import (the import rewrites metrics.jsonl whole too)."""
    shutil.rmtree(out / TENSORBOARD_DIR, ignore_errors=True)
    with open_trackers(
        cfg.tracking, out, spec.run_id, tier_dir=Path(cfg.results_dir) / cfg.tier,
        config=cfg.model_dump(mode="json"),
    ) as trackers:  # fmt: skip
        for row in rows:
            trackers.log(row)


def read_divergence(out: Path) -> dict | None:
    """The divergence fp8rl's loss recorded when it stopped verl (`verl_loss.DIVERGENCE_FILE`), or None."""
    path = Path(out) / DIVERGENCE_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def link_base_checkpoint(model: str | Path, target: Path) -> bool:
    """A diverged run with no save yet: its checkpoint is the base model's weights, as the reference
    trainer keeps (`{run}/checkpoint` holds links to the base model's files, so the evaluators score the
    step-0 policy). False when `model` is not a local directory (a hub id)."""
    model = Path(model)
    if not (model / "config.json").is_file():
        return False
    tmp = target.with_name(f".{target.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in model.iterdir():
        if f.is_file():
            (tmp / f.name).symlink_to(f.resolve())
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return True


def record_outcome(out: str | Path, summary: dict) -> None:
    """Append this attempt's outcome (`status`, `step`, `reason` of its summary) to the run's record."""
    path = Path(out) / OUTCOMES_FILE
    with open(path, "a") as fh:
        fh.write(json.dumps({k: summary.get(k) for k in ("status", "step", "reason")}) + "\n")


def failed_alike(out: str | Path) -> bool:
    """Whether the last two attempts recorded both failed at the same step with the same reason."""
    path = Path(out) / OUTCOMES_FILE
    if not path.is_file():
        return False
    last = [json.loads(line) for line in path.read_text().splitlines() if line.strip()][-2:]
    return len(last) == 2 and last[0]["status"] == "failed" and last[0] == last[1]


def finish_run(
    cfg: ExperimentConfig, spec: RunSpec, out: str | Path, *, exit_code: int, base_model: str | None = None
) -> dict:
    """Merge every attempt's verl log into the run's metrics (none when verl logged nothing), then write
    `throughput.json` and `summary.json`; returns the summary. A NaN/inf logged or recorded by fp8rl's
    loss makes the run `diverged` (verl_metrics.run_status); a diverged run without an exported
    checkpoint (it stopped before its first save) gets the base model's (`link_base_checkpoint`)."""
    run = RunDir(out)
    logs = sorted((run.root / LOG_DIR).glob(LOG_GLOB))
    raw = read_attempt_logs(logs)
    rows = import_logs(logs, run.metrics) if logs else []
    track_rows(cfg, spec, run.root, rows)
    outcome = run_status(
        import_rows(raw, keep_non_finite=True), steps_planned=cfg.schedule.steps, exit_code=exit_code,
        stability=cfg.stability, recorded=read_divergence(run.root),
    )  # fmt: skip
    if outcome.status == "diverged" and not run.checkpoint.is_dir() and base_model:
        link_base_checkpoint(base_model, run.checkpoint)
    run.write_throughput(throughput(rows, spec.spec.fp8))
    final = {k: v for k, v in (rows[-1] if rows else {}).items() if k != "step"}
    summary = build_summary(
        spec.run_id, outcome.status, outcome.reason, outcome.step, cfg.schedule.steps, final,
        provenance(cfg.digest(), _container_id(cfg, train_image(cfg))),
        backend="verl", deviations=deviations(cfg, spec), divergence=outcome.divergence,
    )  # fmt: skip
    run.write_summary(summary)
    record_outcome(run.root, summary)
    measured = measured_step_minutes(raw)
    problem = chain_problem(cfg, cfg.model(spec.model), measured) if measured else None
    if problem and summary["status"] == "failed":  # an attempt that ran out of time: retries may not reach
        print(f"{spec.run_id}: {problem}", file=sys.stderr)
    return summary
