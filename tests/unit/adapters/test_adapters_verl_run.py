"""The verl run writer (fp8rl.adapters.verl_run) and `fp8rl verl train`, without verl: the files it
writes before the job, the run directory it writes after (the reference trainer's summary and
throughput schemas), and a fake job script standing in for Ray + verl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fp8rl.adapters.verl_model import AdapterError
from fp8rl.adapters.verl_run import (
    calib_targets,
    finish_run,
    throughput,
    verl_paths,
    write_run_files,
)
from fp8rl.cli import main
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import load_config
from fp8rl.run_files import RunDir
from fp8rl.run_records import build_summary
from fp8rl.tracking import read_tensorboard

ROOT = Path(__file__).resolve().parents[3]
PAPER = ROOT / "config" / "paper.yaml"
CALIB = RunSpec.parse("dapo/qwen2.5-32b/fp8_calib/blockwise/seed0")
TIS = RunSpec.parse("grpo/qwen3-8b/fp8_tis/tensorwise/seed1")


def _reference(tmp_path: Path, rows: list[dict]) -> Path:
    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ref


def test_calib_targets_are_the_bf16_runs_clip_fractions_of_each_step(tmp_path):
    """As the reference trainer reads them (fp8rl.calibration_targets.reference_targets_by_step), not their mean."""
    ref = _reference(tmp_path, [{"step": 1, "clip/low_neg": 0.02, "clip/high_pos": 0.01},
                                {"step": 2, "clip/low_neg": 0.04}])  # fmt: skip
    cfg = load_config(PAPER, ["calib.reference=run", "calib.population=neg"])
    assert calib_targets(cfg, CALIB, ref) == {1: (0.02, 0.01), 2: (0.04, None)}
    assert calib_targets(cfg, TIS, None) is None  # not a calib cell: the loss needs no target
    smooth = load_config(PAPER, ["calib.reference=run", "calib.population=neg", "calib.run_window=3"])
    assert calib_targets(smooth, CALIB, ref)[1][0] == pytest.approx(0.03)  # steps 1-2's mean, as fp8rl train
    with pytest.raises(AdapterError, match="--reference"):
        calib_targets(cfg, CALIB, None)
    with pytest.raises(AdapterError, match=r"--reference .*nope: no metrics.jsonl"):
        calib_targets(cfg, CALIB, tmp_path / "nope")


def test_write_run_files_checks_the_data_before_writing(tmp_path):
    cfg = load_config(PAPER)
    out = tmp_path / "run"
    paths = verl_paths(cfg, TIS, out, None)
    with pytest.raises(AdapterError, match="no train.jsonl"):
        write_run_files(cfg, TIS, paths, data=tmp_path / "empty")
    assert not out.exists()
    script = write_run_files(cfg, TIS, paths, data=_data(tmp_path), extra_overrides=["a.b=1"])
    assert script == out / "verl_launch.sh" and "a.b=1" in script.read_text()
    ov = json.loads((out / "verl_overrides.json").read_text())
    assert ov["run_id"] == TIS.run_id and ov["overrides"][-1] == "a.b=1"
    assert Path(ov["image"]).is_absolute() and ov["image"].endswith(
        "containers/train.sif"
    )  # paper: apptainer
    assert paths.model == "Qwen/Qwen3-8B" and Path(paths.train_files).is_file()


def test_finish_run_writes_the_reference_trainers_schemas(tmp_path):
    cfg = load_config(PAPER, ["schedule.steps=2"])
    out = tmp_path / "run"
    out.mkdir()
    log = [{"step": s, "data": {"actor/entropy": 0.8, "timing_s/gen": 2.0, "timing_s/update_actor": 1.5}}
           for s in (1, 2)]  # fmt: skip
    _attempt(out, 1, log)
    summary = finish_run(cfg, TIS, out, exit_code=0)
    run = RunDir(out)
    assert run.read_summary() == summary
    assert list(summary) == ["run_id", "status", "reason", "step", "steps_planned", "final", "backend",
                             "deviations", "provenance"]  # fmt: skip
    assert summary["status"] == "ok" and summary["step"] == 2 and summary["final"]["entropy"] == 0.8
    tp = run.read_throughput()
    assert tp == throughput(run.read_metrics(), fp8=True)
    assert tp["phases"] == {"rollout": {"seconds": 4.0}, "train": {"seconds": 3.0}}  # verl counts no tokens
    assert tp["step_time_s"] == 3.5 and "peak_mem_mb" not in tp and tp["fp8_backend"] == "transformer_engine"
    # the imported metrics, under fp8rl's names, in the run's TensorBoard events (as the reference trainer)
    events = read_tensorboard(out / "tb")
    for name in ("entropy", "time/rollout_s", "time/train_s"):
        assert events[name] == pytest.approx({r["step"]: r[name] for r in run.read_metrics()}, rel=1e-6)
    finish_run(cfg, TIS, out, exit_code=0)  # a second import replaces the events, not doubles them
    assert read_tensorboard(out / "tb")["entropy"] == {1: pytest.approx(0.8), 2: pytest.approx(0.8)}


def _attempt(out: Path, n: int, rows: list[dict], tail: str = "") -> None:
    logs = out / "verl_logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"attempt-{n:03d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)


def test_a_resumed_run_keeps_every_attempts_metrics(tmp_path):
    """Attempt 1 logs steps 1-5 and is killed mid-write (checkpoint at step 4); attempt 2 resumes at
    step 5 and ends at 8. The metrics hold steps 1-8 once (step 5 from attempt 2), the stability check
    sees attempt 1's baseline and attempt 2's spike, and a calib run's targets cover all steps."""
    cfg = load_config(
        PAPER, ["schedule.steps=8", "stability.baseline_steps=3", "stability.entropy_spike_m=2"]
    )
    out = tmp_path / "run"
    bf16 = RunSpec.parse("grpo/qwen3-8b/bf16/none/seed1")
    first = [{"step": s, "data": {"actor/entropy": 1.0, "actor/clip/low_neg": 0.01}} for s in range(1, 6)]
    _attempt(out, 1, first, tail='{"step": 6, "data": {"actor/ent')  # SIGKILL mid-line
    second = [{"step": s, "data": {"actor/entropy": 1.0 if s < 7 else 9.0, "actor/clip/low_neg": 0.03}}
              for s in range(5, 9)]  # fmt: skip
    _attempt(out, 2, second)
    summary = finish_run(cfg, bf16, out, exit_code=0)
    rows = RunDir(out).read_metrics()
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert [r["clip/low_neg"] for r in rows] == [0.01] * 4 + [0.03] * 4  # step 5: the later attempt
    assert (summary["status"], summary["step"]) == ("diverged", 8)  # baseline from attempt 1
    calib = load_config(PAPER, ["calib.reference=run", "calib.population=neg"])
    assert calib_targets(calib, CALIB, out) == {s: (0.01 if s < 5 else 0.03, None) for s in range(1, 9)}


def test_finish_run_without_a_log_is_failed(tmp_path):
    cfg = load_config(PAPER)
    summary = finish_run(cfg, TIS, tmp_path, exit_code=3)
    assert (summary["status"], summary["reason"], summary["step"]) == ("failed", "verl exited with code 3", 0)
    assert RunDir(tmp_path).read_throughput()["steps"] == 0
    expected = build_summary(TIS.run_id, "failed", "verl exited with code 3", 0, cfg.schedule.steps, {},
                             summary["provenance"], backend="verl", deviations=summary["deviations"])  # fmt: skip
    assert summary == expected


def _base(tmp_path: Path) -> Path:
    """An existing base folder that holds no model: verl gets the model's hf_id."""
    d = tmp_path / "b"
    d.mkdir(exist_ok=True)
    return d


def _data(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    for split in ("train", "test"):
        (d / f"{split}.jsonl").write_text(json.dumps({"id": "x", "prompt": "2+2?", "answer": "4"}) + "\n")
    return d


def test_cli_train_dry_run_with_run_reference(tmp_path, capsys):
    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "metrics.jsonl").write_text(
        '{"step": 1, "clip/low_all": 0.01, "clip/low_neg": 0.02}\n'
        '{"step": 2, "clip/low_all": 0.03, "clip/low_neg": 0.04}\n'
    )
    out = tmp_path / "run"
    rc = main(["verl", "train", "--config", str(PAPER), "--set", "calib.reference=run",
               "--run", "dapo/qwen2.5-32b/fp8_calib/blockwise/seed0", "--base", str(_base(tmp_path)),
               "--data", str(_data(tmp_path)), "--out", str(out), "--reference", str(ref), "--dry-run"])  # fmt: skip
    assert rc == 0
    spec = json.loads((out / "verl_loss.json").read_text())
    # population neg: each step's clip/low_neg; 16 mini-batches x 1 epoch per step
    assert spec["calib"]["targets"] == {"1": [0.02, None], "2": [0.04, None]}
    assert spec["calib"]["updates_per_step"] == 16
    ov = json.loads((out / "verl_overrides.json").read_text())["overrides"]
    assert "actor_rollout_ref.model.path=Qwen/Qwen2.5-32B" in ov
    assert (out / "verl_data" / "train.parquet").is_file() and "WANT_NODES=4" in capsys.readouterr().out


def test_cli_errors_exit_2(tmp_path, capsys):
    base = [
        "verl",
        "train",
        "--config",
        str(PAPER),
        "--base",
        str(_base(tmp_path)),
        "--data",
        str(_data(tmp_path)),
        "--out",
        str(tmp_path / "o"),
    ]
    assert main([*base, "--run", "dapo/qwen3-8b/fp8_calib/blockwise/seed0", "--dry-run"]) == 2
    assert "calib.reference" in capsys.readouterr().err
    assert (
        main([*base, "--set", "calib.reference=run", "--run", "dapo/qwen3-8b/fp8_calib/blockwise/seed0"]) == 2
    )
    assert "--reference" in capsys.readouterr().err
    assert main([*base, "--run", "dapo/qwen3-8b/fp8/rowwise/seed0"]) == 2
    assert "not in the matrix" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing written before the input was checked


FAKE_PYTHON = r"""#!/usr/bin/env bash
# Stands in for the image's python3: passes the preflight, "trains" by writing verl's file-logger rows,
# then "exports" the checkpoint.
set -euo pipefail
case " $* " in
  *" verl.trainer.main_ppo "*)
    [ "$VERL_USE_EXTERNAL_MODULES" = fp8rl.adapters.verl_loss ] || exit 3
    [ -f "$FP8RL_VERL_LOSS" ] || exit 4
    ckpt=$(printf '%s\n' "$@" | sed -n 's/^trainer.default_local_dir=//p')
    for s in $(seq 1 "$FAKE_STEPS"); do
      echo "{\"step\": $s, \"data\": {\"actor/entropy\": 0.8, \"critic/score/mean\": 0.$s, \"timing_s/gen\": 2.0,
             \"timing_s/update_actor\": 1.0, \"actor/clip/low_neg\": 0.01}}" | tr -d '\n' >> "$VERL_FILE_LOGGER_PATH"
      echo >> "$VERL_FILE_LOGGER_PATH"
    done
    mkdir -p "$ckpt" && echo "$FAKE_STEPS" > "$ckpt/latest_checkpointed_iteration.txt"
    exit "${FAKE_RC:-0}" ;;
  *" fp8rl.adapters.preflight job "*) [ -f "${@: -1}" ] || exit 5 ;;
  *" fp8rl.adapters.verl_checkpoint export "*)
    target=${@: -1}; mkdir -p "$target"; echo '{}' > "$target/config.json" ;;
  *) exit 9 ;;
esac
"""


FAKE_APPTAINER = """#!/usr/bin/env bash
# apptainer exec [--nv] [--bind DIR]... [--env K=V,...] IMAGE CMD...: note the image, run CMD on the host.
shift
while [ "${1#--}" != "$1" ]; do
  case "$1" in --nv) shift ;; --env) export ${2//,/ }; shift 2 ;; *) shift 2 ;; esac
done
echo "$1 HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-}" >> "$FAKE_APPTAINER_LOG"
shift
exec "$@"
"""


@pytest.mark.parametrize(
    ("steps", "rc", "status", "exit_code", "mode"),
    [(12, 0, "ok", 0, "none"), (5, 1, "failed", 1, "none"), (12, 0, "ok", 0, "build")],
)
def test_cli_train_runs_the_job_script_and_imports(tmp_path, monkeypatch, steps, rc, status, exit_code, mode):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("python3", FAKE_PYTHON), ("apptainer", FAKE_APPTAINER)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("FAKE_APPTAINER_LOG", str(tmp_path / "apptainer.log"))
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("FAKE_STEPS", str(steps))
    monkeypatch.setenv("FAKE_RC", str(rc))
    out = tmp_path / "run"
    code = main(["verl", "train", "--config", str(PAPER), "--set", "schedule.steps=12", "--set", f"containers.mode={mode}",
                 "--run", "grpo/qwen3-8b/fp8_tis/tensorwise/seed1", "--base", str(_base(tmp_path)),
                 "--data", str(_data(tmp_path)), "--out", str(out), "--no-progress"])  # fmt: skip
    assert code == exit_code
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == status and summary["step"] == steps and summary["backend"] == "verl"
    assert summary["final"]["clip/low_neg"] == 0.01 and "provenance" in summary
    rows = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, steps + 1)) and rows[0]["time/rollout_s"] == 2.0
    tp = json.loads((out / "throughput.json").read_text())
    assert tp["fp8_backend"] == "transformer_engine" and tp["phases"]["rollout"]["seconds"] == 2.0 * steps
    assert (out / "checkpoint" / "config.json").is_file()  # the last save, whatever verl's exit code
    calls = (tmp_path / "apptainer.log").read_text().splitlines() if mode == "build" else []
    assert len(calls) == (3 if mode == "build" else 0)  # preflight, trainer and export ran in the train image
    for call in calls:  # ... offline, from the shared hub cache
        image, offline = call.split()
        assert image.endswith("/results/containers/train.sif") and offline == "HF_HUB_OFFLINE=1"
    assert [p.name for p in (out / "verl_logs").iterdir()] == ["attempt-001.jsonl"]


@pytest.mark.parametrize("on_failure", ["raise", "record"])
def test_a_run_that_fails_for_good_records_failed_and_exits_0(tmp_path, monkeypatch, on_failure):
    """The DAG's last attempt (`--on-failure record`), or a second attempt failing at the same step with
    the same reason as the first: summary.json says `failed` and the job exits 0 (Snakemake keeps the
    summary and resubmits no more); a first failure on an earlier attempt exits 1 (resubmitted)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("FAKE_STEPS", "5")
    monkeypatch.setenv("FAKE_RC", "1")
    out = tmp_path / "run"
    args = ["verl", "train", "--config", str(PAPER), "--set", "schedule.steps=12", "--set", "containers.mode=none",
            "--run", "grpo/qwen3-8b/fp8_tis/tensorwise/seed1", "--base", str(_base(tmp_path)),
            "--data", str(_data(tmp_path)), "--out", str(out), "--no-progress", "--on-failure", on_failure]  # fmt: skip
    codes = [main(args)]
    if on_failure == "raise":
        codes.append(main(args))  # resubmitted: fails again at step 5 with verl's exit code 1
    assert codes == ([0] if on_failure == "record" else [1, 0])
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["status"], summary["step"]) == ("failed", 5)


def test_cli_train_refuses_a_run_directory_another_process_holds(tmp_path, capsys):
    import subprocess
    import sys

    out = tmp_path / "run"
    hold = "import sys; from fp8rl.run_files import RunDir\nwith RunDir(sys.argv[1]).lock():\n print('held', flush=True); sys.stdin.read()"
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        code = main(["verl", "train", "--config", str(PAPER), "--run", "grpo/qwen3-8b/fp8_tis/tensorwise/seed1",
                     "--base", str(_base(tmp_path)), "--data", str(_data(tmp_path)), "--out", str(out), "--dry-run"])  # fmt: skip
        assert code == 2
        assert f"pid {holder.pid} on host" in capsys.readouterr().err
        assert sorted(p.name for p in out.iterdir()) == ["run.lock"]  # no verl file written
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize(
    ("name", "value"),
    [("actor/entropy", float("nan")), ("critic/score/mean", float("inf")), ("actor/grad_norm", float("nan"))],
)
def test_a_nan_verl_logged_is_the_runs_divergence(tmp_path, name, value):
    """verl trains through a NaN: the run is `diverged` at that step (not `failed` and resubmitted, nor
    `ok`), and metrics.jsonl stays strict JSON without it."""
    cfg = load_config(PAPER, ["schedule.steps=3"])
    out = tmp_path / "run"
    rows = [{"step": s, "data": {"actor/entropy": 0.8, "critic/score/mean": 0.5, "actor/grad_norm": 1.0}}
            for s in (1, 2, 3)]  # fmt: skip
    rows[1]["data"][name] = value
    _attempt(out, 1, rows)
    summary = finish_run(cfg, TIS, out, exit_code=0)
    assert summary["status"] == "diverged", summary
    assert summary["divergence"]["kind"] == "non_finite" and summary["divergence"]["step"] == 2
    assert (
        "NaN" not in (out / "metrics.jsonl").read_text()
        and "Infinity" not in (out / "metrics.jsonl").read_text()
    )


def test_a_divergence_the_loss_recorded_keeps_a_checkpoint(tmp_path):
    """fp8rl's loss stopped verl on a NaN at step 3 (verl exits 1): `diverged` at step 3, exit 0 for
    Snakemake (no resubmission), and, with no save yet, the base model stands as its checkpoint."""
    cfg = load_config(PAPER, ["schedule.steps=8"])
    out = tmp_path / "run"
    _attempt(out, 1, [{"step": s, "data": {"actor/entropy": 0.8}} for s in (1, 2)])
    (out / "verl_divergence.json").write_text('{"kind": "non_finite", "what": "non-finite log_prob"}')
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    (base / "model.safetensors").write_bytes(b"w")
    summary = finish_run(cfg, TIS, out, exit_code=1, base_model=str(base))
    assert summary["status"] == "diverged" and summary["divergence"]["step"] == 3
    assert "log_prob" in summary["reason"]
    ckpt = RunDir(out).checkpoint
    assert (ckpt / "model.safetensors").read_bytes() == b"w" and (ckpt / "config.json").is_file()


def test_the_job_script_exports_the_last_save_when_verl_stops_early(tmp_path):
    """verl exits 1 after its save of step 2 (the loss stopped it): the script exports that save, keeps
    the resumable checkpoints, and exits with verl's code."""
    import os
    import subprocess

    from fp8rl.adapters.verl_launch import render_script

    script = tmp_path / "verl_launch.sh"
    script.write_text(render_script(run_id="r", overrides=["a=1"], out=str(tmp_path), nodes=1,
                                    gpus_per_node=8, runtime_min=60, steps=8))  # fmt: skip
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f"""#!/bin/sh
echo "$@" >> {tmp_path}/calls
case "$*" in *main_ppo*) mkdir -p {tmp_path}/verl_checkpoints/global_step_2 && \\
echo 2 > {tmp_path}/verl_checkpoints/latest_checkpointed_iteration.txt; exit 1 ;; esac
""")
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    res = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert res.returncode == 1
    calls = (tmp_path / "calls").read_text().splitlines()
    assert (
        calls[-1].startswith("-m fp8rl.adapters.verl_checkpoint export")
        and "global_step_2/actor" in calls[-1]
    )
    assert (tmp_path / "verl_checkpoints" / "global_step_2").is_dir()


@pytest.mark.parametrize(("seconds", "warned"), [(5400.0, False), (6300.0, True)])
def test_a_job_slower_than_planned_says_when_the_retries_no_longer_cover_the_chain(
    tmp_path, capsys, seconds, warned
):
    """A Qwen2.5-32B job killed at its time limit after three steps that verl timed (`timing_s/step`):
    at the planned 90 minutes 7 steps a job keep the chain within its 81 jobs; at 105 minutes 6 do,
    84 jobs, and the job's log says to raise retries to 83 while the run has attempts left."""
    from fp8rl.adapters.verl_sizing import measured_step_minutes

    cfg = load_config(PAPER)
    spec = RunSpec.parse("grpo/qwen2.5-32b/bf16/none/seed0")
    out = tmp_path / "run"
    out.mkdir()
    rows = [{"step": s, "data": {"actor/entropy": 0.8, "timing_s/step": seconds}} for s in (1, 2, 3)]
    _attempt(out, 1, rows)
    assert measured_step_minutes(rows) == pytest.approx(seconds / 60)
    summary = finish_run(cfg, spec, out, exit_code=1)
    assert summary["status"] == "failed"
    err = capsys.readouterr().err
    if warned:
        assert "measured 105.0-minute steps (planned 90): 6 steps kept per job" in err
        assert (
            "needs 84 jobs for 500 steps, but resources.train.retries 80 allow 81; set retries >= 83" in err
        )
    else:
        assert "measured" not in err


def test_measured_step_minutes_is_the_median_of_verls_step_timings():
    from fp8rl.adapters.verl_sizing import measured_step_minutes

    rows = [{"step": 1, "data": {"timing_s/step": 600.0}}, {"step": 2, "data": {"timing_s/step": 6000}},
            {"step": 3, "data": {"timing_s/step": 1200.0}}, {"step": 4, "data": {"timing_s/step": None}},
            {"step": 5, "data": {"timing_s/step": True}}, {"step": 6, "data": {}}]  # fmt: skip
    assert measured_step_minutes(rows) == pytest.approx(20.0)
    assert measured_step_minutes([{"step": 1, "data": {}}]) is None
