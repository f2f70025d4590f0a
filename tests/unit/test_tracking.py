"""fp8rl.tracking: every chosen tracker receives each metrics row under its own name and step."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import time
from pathlib import Path

import pytest

from fp8rl.config import TrackingConfig
from fp8rl.tracking import (
    TrackerUnavailable,
    check_trackers,
    open_trackers,
    read_tensorboard,
    wandb_tags,
)

RUN_ID = "grpo/tiny/fp8/tensorwise/seed0"


def rows(steps=range(1, 5), shift=0.0):
    return [
        {"step": s, "reward/mean": 0.1 * s + shift, "clip/low_neg": 0.0123 / s, "entropy": 1.0 - 0.01 * s}
        for s in steps
    ]


def _log(cfg, run_dir, tier_dir, rows_, resume_step=0, digest=None, config=None):
    with open_trackers(
        cfg, run_dir, RUN_ID, tier_dir=tier_dir, config=config or {"a": {"b": 1}}, resume_step=resume_step,
        train_digest=digest,
    ) as t:  # fmt: skip
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


def _tb_points(log_dir):
    """Every scalar event TensorBoard shows, as (tag, step) pairs: one per step unless a run doubled it."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return sorted((tag, e.step) for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag))


@pytest.mark.parametrize(
    "digests", [("aaaa", "bbbb"), ("aaaa", "aaaa")], ids=["config_change", "killed_early"]
)
def test_a_fresh_start_drops_the_earlier_attempts_events(tmp_path, digests):
    """A config change (the checkpoint is stale) or a kill before the first checkpoint starts the run
    afresh with metrics.jsonl emptied: TensorBoard shows only the new attempt, one point per step."""
    _log(TrackingConfig(), tmp_path / "run", tmp_path, rows(range(1, 5)), digest=digests[0])
    _log(TrackingConfig(), tmp_path / "run", tmp_path, rows(range(1, 3), shift=1.0), digest=digests[1])
    _assert_close(read_tensorboard(tmp_path / "run" / "tb"), _as_series(rows(range(1, 3), shift=1.0)))
    assert _tb_points(tmp_path / "run" / "tb") == sorted(
        (k, s) for k in rows()[0] if k != "step" for s in (1, 2)
    )


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


def _mlflow_runs(tier_dir):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=(tier_dir / "mlruns").as_uri())
    return client, client.search_runs([client.get_experiment_by_name("fp8rl").experiment_id])


def _history(client, run, name="reward/mean"):
    points = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, name)]
    assert len(points) == len({s for s, _ in points}), f"two points at one step: {points}"
    return dict(points)


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="mlflow-skinny not installed")
def test_mlflow_a_config_change_is_a_new_run_with_its_own_params(tmp_path):
    cfg = TrackingConfig(tensorboard=False, mlflow={"enabled": True})
    _log(cfg, tmp_path / "run", tmp_path / "tier", rows(), digest="aaaa", config={"lr": 1e-5})
    _log(cfg, tmp_path / "run", tmp_path / "tier", rows(range(1, 3), 1.0), digest="bbbb", config={"lr": 2e-5})
    client, (run,) = _mlflow_runs(tmp_path / "tier")
    assert run.data.params["lr"] == "2e-05" and run.data.tags["fp8rl.train_digest"] == "bbbb"
    assert _history(client, run) == _as_series(rows(range(1, 3), 1.0))["reward/mean"]


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="mlflow-skinny not installed")
def test_mlflow_a_kill_before_the_first_checkpoint_leaves_no_duplicate_points(tmp_path):
    cfg = TrackingConfig(tensorboard=False, mlflow={"enabled": True})
    _log(cfg, tmp_path / "run", tmp_path / "tier", rows(range(1, 3)), digest="aaaa")
    _log(cfg, tmp_path / "run", tmp_path / "tier", rows(range(1, 4), 1.0), digest="aaaa")  # resume_step 0
    client, (run,) = _mlflow_runs(tmp_path / "tier")
    assert _history(client, run) == _as_series(rows(range(1, 4), 1.0))["reward/mean"]


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="mlflow-skinny not installed")
def test_mlflow_a_resume_keeps_only_the_points_up_to_its_checkpoint(tmp_path):
    """Killed after step 4 with its checkpoint at step 2: the resumed attempt rewrites steps 3-5."""
    cfg = TrackingConfig(tensorboard=False, mlflow={"enabled": True})
    _log(cfg, tmp_path / "run", tmp_path / "tier", rows(range(1, 5)), digest="aaaa")
    _log(cfg, tmp_path / "run", tmp_path / "tier", rows(range(3, 6), 1.0), resume_step=2, digest="aaaa")
    client, (run,) = _mlflow_runs(tmp_path / "tier")
    want = _as_series(rows(range(1, 3)) + rows(range(3, 6), 1.0))
    for name in want:
        assert _history(client, run, name) == pytest.approx(want[name]), name


def test_wandb_takes_a_new_run_id_on_a_fresh_start_and_keeps_it_on_resume(tmp_path, monkeypatch):
    """W&B drops a step below its run's last, so a fresh start under the old id would lose its points."""

    inits = _fake_wandb(monkeypatch)
    cfg = TrackingConfig(tensorboard=False, wandb={"enabled": True})
    tier = tmp_path / "smoke"
    _log(cfg, tmp_path / "run", tier, rows(range(1, 3)), digest="aaaa")
    _log(cfg, tmp_path / "run", tier, rows(range(1, 3)), digest="aaaa")  # killed before a checkpoint
    _log(cfg, tmp_path / "run", tier, rows(range(2, 4)), resume_step=1, digest="aaaa")
    ids = inits["id"]
    assert ids[0] != ids[1] and ids[2] == ids[1]
    assert re.fullmatch(r"smoke-[0-9a-f]{6}-grpo-tiny-fp8-tensorwise-seed0-aaaa-[0-9a-f]+", ids[0])


def _fake_wandb(monkeypatch) -> dict[str, list]:
    """A stand-in `wandb` module that records the arguments of each `wandb.init`, by name."""
    import sys
    import types

    inits: dict[str, list] = {}

    class Run:
        def log(self, *a, **k):
            pass

        def finish(self):
            pass

    def init(**kw):
        for k, v in kw.items():
            inits.setdefault(k, []).append(v)
        return Run()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init, Settings=lambda **kw: None))
    monkeypatch.setattr("fp8rl.tracking._require", lambda *a: None)
    return inits


def test_wandb_runs_of_two_configs_with_the_same_run_id_stay_apart(tmp_path, monkeypatch):
    """config/smoke.yaml and config/ci.yaml are both tier smoke, with the same run ids: their W&B runs
    differ by the tier folder's digest in the id, and are grouped by tier and tagged tier, arm, algorithm."""
    inits = _fake_wandb(monkeypatch)
    cfg = TrackingConfig(tensorboard=False, wandb={"enabled": True})
    _log(cfg, tmp_path / "a" / "run", Path("results") / "smoke", rows(range(1, 2)), digest="aaaa")
    _log(cfg, tmp_path / "b" / "run", Path("results/ci") / "smoke", rows(range(1, 2)), digest="aaaa")
    first, second = inits["id"]
    assert first.split("-")[:2] != second.split("-")[:2] and first.split("-")[0] == "smoke"
    assert inits["name"] == [RUN_ID, RUN_ID] and inits["group"] == ["smoke", "smoke"]
    assert inits["tags"] == [["smoke", "fp8", "grpo"]] * 2


def test_wandb_tags_name_the_arm_as_the_tables_do():
    study = {"study": {"arms": {"tis_calib": "grpo/tiny/fp8_tis_calib/tensorwise/s4"}}}
    assert wandb_tags("clipping", "grpo/tiny/fp8_tis_calib/tensorwise/s4/seed3", study) == [
        "clipping", "tis_calib", "grpo"
    ]  # fmt: skip
    assert wandb_tags("mechanism", "dapo/tiny/fp8/rowwise/e5m2_d2/seed0", None) == [
        "mechanism", "fp8/e5m2_d2", "dapo"
    ]  # fmt: skip


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
