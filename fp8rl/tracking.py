"""Live experiment tracking: a run's metrics go to TensorBoard (and optionally W&B, MLflow) as it trains.

`open_trackers(cfg.tracking, run_dir, ...)` returns a `Trackers` whose `log(row)` sends one
metrics.jsonl row (docs/architecture.md#metrics) to every tracker the config's `tracking:` section
chose, under the row's own metric names and at its `step`:

- `tensorboard` (on by default): event files in `{run}/tb/`; `tensorboard --logdir
  {results_dir}/{tier}/runs` shows every run of a tier. A resumed run passes `resume_step`, and the
  writer's `purge_step` hides the events the earlier attempt wrote after its checkpoint, as
  metrics.jsonl is truncated back to it.
- `wandb` (off): `wandb.init(mode=...)`, files under `{run}/wandb/`; offline needs no network.
- `mlflow` (off): one MLflow run per fp8rl run, named by its run id, in `tracking_uri` (default: the
  file store `{results_dir}/{tier}/mlruns`).

Each tracker's package is imported only when chosen; a chosen tracker that is not installed is a
`TrackerUnavailable` naming the config key and the pip package. Non-numeric and non-finite values are
skipped (metrics.jsonl has none: a value that is not applicable is absent).
"""

from __future__ import annotations

import importlib.util
import math
import shlex
from pathlib import Path
from typing import Any, Protocol

from fp8rl.config import TrackingConfig

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


class TensorBoardTracker:
    def __init__(self, log_dir: Path, resume_step: int):
        _require("tensorboard", "tracking.tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: a resumed run rewrites the steps after its checkpoint; hide the old ones
        self.writer = SummaryWriter(str(log_dir), purge_step=resume_step + 1 if resume_step else None)

    def log(self, scalars: dict[str, float], step: int) -> None:
        for name, value in scalars.items():
            self.writer.add_scalar(name, value, step)
        self.writer.flush()  # live: visible in TensorBoard after every step

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    def __init__(self, cfg: Any, run_dir: Path, run_id: str, config: dict | None):
        _require("wandb", "tracking.wandb.enabled", "wandb")
        import wandb

        (run_dir / WANDB_DIR).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=cfg.project,
            entity=cfg.entity,
            name=run_id,
            id=run_id.replace("/", "-"),
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


class MlflowTracker:
    def __init__(self, cfg: Any, default_uri: str, run_id: str, config: dict | None):
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
        found = self.client.search_runs([exp_id], filter_string=f"tags.`fp8rl.run_id` = '{run_id}'")
        if found:  # a resumed run continues its MLflow run
            self.run_id = found[0].info.run_id
        else:
            run = self.client.create_run(exp_id, run_name=run_id, tags={"fp8rl.run_id": run_id})
            self.run_id = run.info.run_id
            for key, value in _flat(config or {}).items():
                self.client.log_param(self.run_id, key, str(value)[:500])

    def log(self, scalars: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = _now_ms()
        metrics = [Metric(k, v, now, step) for k, v in scalars.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


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
) -> Trackers:
    """The trackers `cfg` turns on for the run in `run_dir`; `tier_dir` (`{results_dir}/{tier}`) holds
    the default MLflow store, `config` is the resolved config recorded by W&B and MLflow, and
    `resume_step` the last step a resumed run kept."""
    run_dir = Path(run_dir)
    out: list[Tracker] = []
    if cfg.tensorboard:
        out.append(TensorBoardTracker(run_dir / TENSORBOARD_DIR, resume_step))
    if cfg.wandb.enabled:
        out.append(WandbTracker(cfg.wandb, run_dir, run_id, config))
    if cfg.mlflow.enabled:
        uri = (Path(tier_dir) / MLFLOW_DIR).resolve().as_uri()
        out.append(MlflowTracker(cfg.mlflow, uri, run_id, config))
    return Trackers(out)


def read_tensorboard(log_dir: str | Path) -> dict[str, dict[int, float]]:
    """Read a run's TensorBoard event files back: metric name -> {step: value} (float32, as stored),
    after TensorBoard's own purge of the steps a resumed run rewrote."""
    _require("tensorboard", "tracking.tensorboard", "tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
