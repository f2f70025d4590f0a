"""fp8rl.tracking: every chosen tracker receives each metrics row under its own name and step."""

from __future__ import annotations

import importlib.util
import json
import math
import time

import pytest

from fp8rl.config import TrackingConfig
from fp8rl.tracking import TrackerUnavailable, check_trackers, open_trackers, read_tensorboard

RUN_ID = "grpo/tiny/fp8/tensorwise/seed0"


def rows(steps=range(1, 5), shift=0.0):
    return [
        {"step": s, "reward/mean": 0.1 * s + shift, "clip/low_neg": 0.0123 / s, "entropy": 1.0 - 0.01 * s}
        for s in steps
    ]


def _log(cfg, run_dir, tier_dir, rows_, resume_step=0):
    with open_trackers(
        cfg, run_dir, RUN_ID, tier_dir=tier_dir, config={"a": {"b": 1}}, resume_step=resume_step
    ) as t:
        for row in rows_:
            t.log(row)


def _as_series(rows_):
    out: dict[str, dict[int, float]] = {}
    for row in rows_:
        for k, v in row.items():
            if k != "step":
                out.setdefault(k, {})[row["step"]] = v
    return out


def _assert_close(got: dict[str, dict[int, float]], want: dict[str, dict[int, float]]) -> None:
    assert set(got) == set(want)
    for name, series in want.items():
        assert set(got[name]) == set(series), name
        for step, v in series.items():  # TensorBoard stores float32
            assert math.isclose(got[name][step], v, rel_tol=1e-6), (name, step)


def test_tensorboard_events_hold_the_rows_under_their_metric_names(tmp_path):
    data = rows()
    data[1]["gibberish/rate"] = float("nan")  # not finite: never sent
    _log(TrackingConfig(), tmp_path / "run", tmp_path, data)
    want = _as_series(rows())
    _assert_close(read_tensorboard(tmp_path / "run" / "tb"), want)


def test_resumed_run_replaces_the_steps_after_its_checkpoint(tmp_path):
    """A killed run logged steps 1-4; resumed from its step-2 checkpoint it rewrites 3-5."""
    _log(TrackingConfig(), tmp_path / "run", tmp_path, rows(range(1, 5)))
    _log(TrackingConfig(), tmp_path / "run", tmp_path, rows(range(3, 6), shift=1.0), resume_step=2)
    want = _as_series(rows(range(1, 3)) + rows(range(3, 6), shift=1.0))
    _assert_close(read_tensorboard(tmp_path / "run" / "tb"), want)


def test_nothing_is_written_when_every_tracker_is_off(tmp_path):
    _log(TrackingConfig(tensorboard=False), tmp_path / "run", tmp_path, rows())
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="mlflow-skinny not installed")
def test_mlflow_file_store_gets_every_step(tmp_path):
    import mlflow

    cfg = TrackingConfig(tensorboard=False, mlflow={"enabled": True})
    _log(cfg, tmp_path / "run", tmp_path / "tier", rows())
    _log(cfg, tmp_path / "run", tmp_path / "tier", rows(range(5, 6)), resume_step=4)  # resumed: same run
    client = mlflow.MlflowClient(tracking_uri=(tmp_path / "tier" / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("fp8rl").experiment_id])
    assert run.info.run_name == RUN_ID and run.data.params["a.b"] == "1"
    history = client.get_metric_history(run.info.run_id, "reward/mean")
    assert {m.step: m.value for m in history} == _as_series(rows(range(1, 6)))["reward/mean"]


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb not installed")
def test_wandb_offline_writes_the_run_in_the_run_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = TrackingConfig(tensorboard=False, wandb={"enabled": True, "mode": "offline"})
    _log(cfg, tmp_path / "run", tmp_path, rows())
    (offline,) = (tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb")
    # wandb's own reader of offline files lives in its Go core; its records hold each history item
    # as the metric's name and the value's JSON text, which is what `wandb sync` uploads
    deadline = time.monotonic() + 60  # wandb's service process may still be writing after finish()
    while b"entropy" not in (blob := offline.read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    for row in rows():
        for name, value in row.items():
            if name != "step":
                assert name.encode() in blob and json.dumps(value).encode() in blob, (name, value)


def test_a_chosen_tracker_that_is_not_installed_names_the_key_and_package(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a)
    )
    check_trackers(TrackingConfig())  # MLflow off: nothing needed
    with pytest.raises(TrackerUnavailable, match=r"tracking\.mlflow\.enabled.*pip install mlflow-skinny"):
        check_trackers(TrackingConfig(mlflow={"enabled": True}))
    assert issubclass(TrackerUnavailable, ValueError)  # the CLI reports it as a usage error
