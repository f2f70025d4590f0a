"""Live experiment tracking: a run's metrics go to TensorBoard (and optionally W&B, MLflow) as it trains.

`open_trackers(cfg.tracking, run_dir, ...)` returns a `Trackers` whose `log(row)` sends one
metrics.jsonl row (docs/architecture.md#metrics) to every tracker the config's `tracking:` section
chose, under the row's own metric names and at its `step`:

- `tensorboard` (on by default): event files in `{run}/tb/`; `tensorboard --logdir
  {results_dir}/{tier}/runs` shows every run of a tier. A resumed run passes `resume_step`, and the
  writer's `purge_step` hides the events the earlier attempt wrote after its checkpoint, as
  metrics.jsonl is truncated back to it.
- `wandb` (off): `wandb.init(mode=...)`, files under `{run}/wandb/`; offline needs no network. Each
  run is one W&B run named by its run id, in the group of its tier, tagged with tier, arm and
  algorithm; its W&B id starts with the tier and a digest of `{results_dir}/{tier}`, so two configs'
  runs of the same run id stay apart.
- `mlflow` (off): one MLflow run per fp8rl run, named by its run id and tagged with its train digest,
  in `tracking_uri` (default: the file store `{results_dir}/{tier}/mlruns`).

The trackers hold what metrics.jsonl holds. A fresh start (`resume_step` 0: a first attempt, a
config change that made the checkpoint stale, or a kill before the first checkpoint) empties
metrics.jsonl, so it removes the run's earlier TensorBoard events, deletes its earlier MLflow runs
(MLflow's soft delete: `mlflow gc` purges them) and opens a new W&B run id (kept in
`{run}/wandb/fp8rl_run_id` for a resume). A resume continues the tracker run of the same train digest;
an MLflow run that holds steps after the checkpoint is copied up to it into a new run, since MLflow
cannot remove a logged point.

Each tracker's package is imported only when chosen; a chosen tracker that is not installed is a
`TrackerUnavailable` naming the config key and the pip package. Non-numeric and non-finite values are
skipped (metrics.jsonl has none: a value that is not applicable is absent).
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import shlex
import time
from pathlib import Path
from typing import Any, Protocol

from fp8rl.config import RunSpec, TrackingConfig, arm_cell

TENSORBOARD_DIR = "tb"
WANDB_DIR = "wandb"
MLFLOW_DIR = "mlruns"


class TrackerUnavailable(ValueError):
    """A tracker chosen in the config whose package is not installed (a config problem: the CLI
    reports it before any work starts)."""


def _require(module: str, key: str, package: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise TrackerUnavailable(
            f"{key} is on in the config but {module!r} is not installed: pip install {package} "
            f"(or pip install 'fp8rl[tracking]'), or set {key} to false"
        )


def check_trackers(cfg: TrackingConfig) -> None:
    """Raise TrackerUnavailable for the first chosen tracker whose package is missing."""
    if cfg.tensorboard:
        _require("tensorboard", "tracking.tensorboard", "tensorboard")
    if cfg.wandb.enabled:
        _require("wandb", "tracking.wandb.enabled", "wandb")
    if cfg.mlflow.enabled:
        _require("mlflow", "tracking.mlflow.enabled", "mlflow-skinny")


def tensorboard_command(runs: str | Path) -> str:
    """The shell command that shows every run under a tier's runs folder (fp8rl.run_files.runs_dir)."""
    return f"tensorboard --logdir {shlex.quote(str(runs))}"


class Tracker(Protocol):
    def log(self, scalars: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


TB_EVENTS = "events.out.tfevents.*"
WANDB_ID_FILE = "fp8rl_run_id"
RUN_ID_TAG = "fp8rl.run_id"
DIGEST_TAG = "fp8rl.train_digest"


class TensorBoardTracker:
    def __init__(self, log_dir: Path, resume_step: int):
        _require("tensorboard", "tracking.tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        if not resume_step and log_dir.is_dir() and not log_dir.is_symlink():
            for old in log_dir.glob(TB_EVENTS):  # a fresh start: the earlier attempt's points are gone
                old.unlink()
        # purge_step: a resumed run rewrites the steps after its checkpoint; hide the old ones
        self.writer = SummaryWriter(str(log_dir), purge_step=resume_step + 1 if resume_step else None)

    def log(self, scalars: dict[str, float], step: int) -> None:
        for name, value in scalars.items():
            self.writer.add_scalar(name, value, step)
        self.writer.flush()  # live: visible in TensorBoard after every step

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    def __init__(
        self,
        cfg: Any,
        run_dir: Path,
        run_id: str,
        config: dict | None,
        resume_step: int,
        train_digest: str | None,
        tier_dir: Path,
    ):
        _require("wandb", "tracking.wandb.enabled", "wandb")
        import wandb

        (run_dir / WANDB_DIR).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=cfg.project,
            entity=cfg.entity,
            name=run_id,
            group=Path(tier_dir).name,
            tags=wandb_tags(Path(tier_dir).name, run_id, config),
            id=wandb_run_id(run_dir, run_id, resume_step, train_digest, tier_dir),
            resume="allow",
            dir=str(run_dir),
            mode=cfg.mode,
            config=config,
            settings=wandb.Settings(silent=True, console="off"),
        )

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


def wandb_run_id(
    run_dir: Path, run_id: str, resume_step: int, train_digest: str | None, tier_dir: str | Path = ""
) -> str:
    """The W&B run id of this attempt: a resume continues the id the fresh start recorded, a fresh start
    takes a new one (W&B drops steps below a run's last, so reusing it would lose the new points). It
    starts with the tier and a digest of the tier's folder (`{results_dir}/{tier}`), so the same run id
    under two configs (config/smoke.yaml and config/ci.yaml are both tier smoke) are two W&B runs."""
    path = run_dir / WANDB_DIR / WANDB_ID_FILE
    if resume_step and path.is_file() and not path.is_symlink():
        return path.read_text().strip()
    where = hashlib.sha256(str(tier_dir).encode()).hexdigest()[:6] if str(tier_dir) else ""
    run = run_id.replace("/", "-")
    if len(run) > WANDB_RUN_PART:  # W&B ids stop at 128 characters
        run = hashlib.sha256(run.encode()).hexdigest()[:16]
    parts = [Path(tier_dir).name, where, run, (train_digest or "")[:8], f"{time.time_ns():x}"]
    new = "-".join(p for p in parts if p)
    if path.is_symlink():
        path.unlink()
    path.write_text(new + "\n")
    return new


WANDB_RUN_PART = 80  # the run id's share of a W&B id (tier, digests and time take the rest of 128)


def wandb_tags(tier: str, run_id: str, config: dict | None) -> list[str]:
    """The W&B tags of a run: its tier, its arm as the tables name it (the study arm whose cells hold
    the run, else the variant, with its FP8 condition where it has one) and its algorithm."""
    try:
        spec = RunSpec.parse(run_id)
    except ValueError:
        return [t for t in (tier, run_id.split("/", 1)[0]) if t]
    arm = spec.variant if spec.condition is None else f"{spec.variant}/{spec.condition}"
    arms = ((config or {}).get("study") or {}).get("arms") or {}
    arm = next((name for name, prefix in arms.items() if arm_cell(prefix, run_id)), arm)
    return list(dict.fromkeys(t for t in (tier, arm, spec.algo) if t))


class MlflowTracker:
    def __init__(
        self,
        cfg: Any,
        default_uri: str,
        run_id: str,
        config: dict | None,
        resume_step: int,
        train_digest: str | None,
    ):
        _require("mlflow", "tracking.mlflow.enabled", "mlflow-skinny")
        import os

        import mlflow

        uri = cfg.tracking_uri or default_uri
        if uri.startswith("file:"):
            # MLflow 3 refuses its file store unless asked; it is the one local store mlflow-skinny has
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = mlflow.MlflowClient(tracking_uri=uri)
        exp = self.client.get_experiment_by_name(cfg.experiment)
        exp_id = exp.experiment_id if exp else self.client.create_experiment(cfg.experiment)
        earlier = self.client.search_runs([exp_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'")
        same = [r for r in earlier if r.data.tags.get(DIGEST_TAG) == train_digest]
        if resume_step and same:  # a resumed run continues its MLflow run, up to its checkpoint
            self.run_id = same[0].info.run_id
            if _steps_after(self.client, same[0], resume_step):
                self.run_id = self._create(exp_id, run_id, config, train_digest)
                _copy_history(self.client, same[0], self.run_id, resume_step)
                self.client.delete_run(same[0].info.run_id)
        else:
            if not resume_step:  # a fresh start: metrics.jsonl was emptied, so are the earlier runs
                for old in earlier:
                    self.client.delete_run(old.info.run_id)
            self.run_id = self._create(exp_id, run_id, config, train_digest)

    def _create(self, exp_id: str, run_id: str, config: dict | None, train_digest: str | None) -> str:
        tags = {RUN_ID_TAG: run_id} | ({DIGEST_TAG: train_digest} if train_digest else {})
        new = self.client.create_run(exp_id, run_name=run_id, tags=tags).info.run_id
        for key, value in _flat(config or {}).items():
            self.client.log_param(new, key, str(value)[:500])
        return new

    def log(self, scalars: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = _now_ms()
        metrics = [Metric(k, v, now, step) for k, v in scalars.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _steps_after(client: Any, run: Any, step: int) -> bool:
    return any(
        m.step > step for key in run.data.metrics for m in client.get_metric_history(run.info.run_id, key)
    )


def _copy_history(client: Any, run: Any, new_id: str, step: int) -> None:
    """Copy `run`'s metric points up to `step` into the MLflow run `new_id`."""
    kept = [
        m
        for key in run.data.metrics
        for m in client.get_metric_history(run.info.run_id, key)
        if m.step <= step
    ]
    for i in range(0, len(kept), 1000):  # MLflow's log_batch takes at most 1000 metrics
        client.log_batch(new_id, metrics=kept[i : i + 1000])


def _flat(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, f"{key}."))
        else:
            out[key] = v
    return out


def scalars_of(row: dict[str, Any]) -> dict[str, float]:
    """A metrics row's finite numbers, without `step`."""
    return {
        k: float(v)
        for k, v in row.items()
        if k != "step" and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


class Trackers:
    """The trackers of one run; `log(row)` sends a metrics row to each, `close()` flushes them."""

    def __init__(self, trackers: list[Tracker]):
        self.trackers = trackers

    def log(self, row: dict[str, Any]) -> None:
        scalars = scalars_of(row)
        for t in self.trackers:
            t.log(scalars, int(row["step"]))

    def close(self) -> None:
        for t in self.trackers:
            t.close()
        self.trackers = []

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_trackers(
    cfg: TrackingConfig,
    run_dir: str | Path,
    run_id: str,
    *,
    tier_dir: str | Path,
    config: dict | None = None,
    resume_step: int = 0,
    train_digest: str | None = None,
) -> Trackers:
    """The trackers `cfg` turns on for the run in `run_dir`; `tier_dir` (`{results_dir}/{tier}`) holds
    the default MLflow store, `config` is the resolved config recorded by W&B and MLflow,
    `resume_step` the last step a resumed run kept (0: a fresh start, which drops the trackers' earlier
    points) and `train_digest` the run's training settings, which a resumed tracker run must share."""
    run_dir = Path(run_dir)
    out: list[Tracker] = []
    if cfg.tensorboard:
        out.append(TensorBoardTracker(run_dir / TENSORBOARD_DIR, resume_step))
    if cfg.wandb.enabled:
        out.append(
            WandbTracker(cfg.wandb, run_dir, run_id, config, resume_step, train_digest, Path(tier_dir))
        )
    if cfg.mlflow.enabled:
        uri = (Path(tier_dir) / MLFLOW_DIR).resolve().as_uri()
        out.append(MlflowTracker(cfg.mlflow, uri, run_id, config, resume_step, train_digest))
    return Trackers(out)


def read_tensorboard(log_dir: str | Path) -> dict[str, dict[int, float]]:
    """Read a run's TensorBoard event files back: metric name -> {step: value} (float32, as stored),
    after TensorBoard's own purge of the steps a resumed run rewrote."""
    _require("tensorboard", "tracking.tensorboard", "tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
