"""The run directory (fp8rl.run_files), the summary and throughput records (fp8rl.run_records), the
metrics file and the two readings of a bf16 run's calibration targets (fp8rl.calibration_targets)."""

import json
from pathlib import Path

import pytest

from fp8rl.calibration_targets import reference_targets_by_step
from fp8rl.run_files import RunDir, runs_dir
from fp8rl.run_records import PHASES, build_summary, throughput_record

RUN_ID = "grpo/tiny/fp8/tensorwise/seed0"


def _metrics(root: Path, rows: list[dict]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_paths_of_a_run_directory():
    run = RunDir.of(runs_dir("results", "smoke"), RUN_ID)
    base = Path("results/smoke/runs") / RUN_ID
    assert run.root == base
    assert (run.config, run.metrics, run.summary, run.throughput, run.ratio_hist, run.checkpoint) == (
        base / "config.yaml", base / "metrics.jsonl", base / "summary.json", base / "throughput.json",
        base / "ratio_hist.json", base / "checkpoint",
    )  # fmt: skip
    assert run.eval_file("lm_eval") == base / "eval/lm_eval.json"
    assert run.eval_file("agent") == base / "eval/agent.json"
    with pytest.raises(ValueError, match="'bfcl'.*known suites: lm_eval, agent"):
        run.eval_file("bfcl")
    # a Snakemake wildcard pattern keeps its braces
    assert str(RunDir.of("R/runs", "{algo}/seed{seed}").summary) == "R/runs/{algo}/seed{seed}/summary.json"
    assert (run.lock_file, run.run_file) == (base / "run.lock", base / "run.json")
    with pytest.raises(AttributeError, match="config.yaml"):
        run.config = Path("elsewhere.yaml")  # a path of the directory, never rebound


def test_metrics_are_truncated_to_the_checkpoint_offset(tmp_path):
    run = RunDir(tmp_path / "run")
    assert run.read_metrics() == [] and run.metrics_size() == 0
    run.reset_metrics(0)
    run.append_metrics({"step": 1, "x": 1.0})
    offset = run.append_metrics({"step": 2, "x": float("nan"), "y": 2.0})
    run.append_metrics({"step": 3, "x": 3.0})
    with open(run.metrics, "a") as fh:
        fh.write('{"step": 4, "x"')  # a line cut by SIGKILL
    with pytest.raises(ValueError, match=r"metrics.jsonl:4: malformed"):
        run.read_metrics()
    run.reset_metrics(offset)
    assert run.read_metrics() == [
        {"step": 1, "x": 1.0},
        {"step": 2, "y": 2.0},
    ]  # NaN is absent, never written
    with pytest.raises(ValueError, match=r"metrics.jsonl: \d+ bytes, shorter than the checkpoint's offset"):
        run.reset_metrics(offset + 100)


def test_summary_round_trips_and_keeps_its_key_order(tmp_path):
    prov = {"git_commit": "abc", "config_digest": "d"}
    ref = build_summary(RUN_ID, "diverged", "step 3: entropy spike", 3, 12, {"entropy": 2.5}, prov)
    assert list(ref) == ["run_id", "status", "reason", "step", "steps_planned", "final", "provenance"]
    verl = build_summary(RUN_ID, "ok", None, 12, 12, {}, prov, backend="verl", deviations=["x"])
    assert list(verl) == ["run_id", "status", "reason", "step", "steps_planned", "final", "backend",
                          "deviations", "provenance"]  # fmt: skip
    run = RunDir(tmp_path / "run")
    run.write_summary(ref)
    assert run.read_summary() == ref
    with pytest.raises(ValueError, match="'finished'.*allowed: ok, diverged, failed"):
        build_summary(RUN_ID, "finished", None, 1, 1, {}, prov)


@pytest.mark.parametrize(
    ("text", "why"),
    [(None, "no such file"), ('{"status": "ok"', "unreadable JSON"), ("[1]", "not a JSON object")],
)
def test_readers_name_the_file(tmp_path, text, why):
    run = RunDir(tmp_path)
    if text is not None:
        run.summary.write_text(text)
        run.throughput.write_text(text)
    for read, path in ((run.read_summary, run.summary), (run.read_throughput, run.throughput)):
        with pytest.raises(ValueError, match=f"{path}: {why}"):
            read()


def test_throughput_record_of_the_reference_trainer(tmp_path):
    rows = [
        {"step": s, "time/rollout_s": 1.0, "tok/rollout": 100.0, "time/train_s": 0.5, "tok/train": 300.0,
         "time/step_s": 1.6 + s / 10}
        for s in (1, 2)
    ]  # fmt: skip
    rec = throughput_record(rows, emulated=True, device="cpu", fp8_backend="emulated", peak_mem_mb=812.04,
                            threads=2, fp8_gemms={"emulated": 6, "scaled_mm": 0})  # fmt: skip
    assert rec == {
        "emulated": True, "device": "cpu", "fp8_backend": "emulated", "steps": 2, "step_time_s": 1.75,
        "peak_mem_mb": 812.0, "threads": 2,
        "phases": {"rollout": {"seconds": 2.0, "tokens": 200, "tokens_per_s": 100.0},
                   "train": {"seconds": 1.0, "tokens": 600, "tokens_per_s": 600.0}},
        "fp8_gemms": {"emulated": 6, "scaled_mm": 0},
    }  # fmt: skip
    assert list(rec) == ["emulated", "device", "fp8_backend", "steps", "step_time_s", "peak_mem_mb", "threads",
                         "phases", "fp8_gemms"]  # fmt: skip
    run = RunDir(tmp_path)
    run.write_throughput(rec)
    assert run.read_throughput() == rec


def test_throughput_record_without_tokens_or_step_times():
    """verl's log has phase timings only: tokens and what the writer does not know are absent, never 0,
    and the step time is the phases' seconds per step."""
    rows = [{"step": 1, "time/rollout_s": 2.0, "time/train_s": 1.0}, {"step": 2, "time/rollout_s": 4.0}]
    rec = throughput_record(rows, emulated=False, device="cuda", fp8_backend="none")
    assert rec["phases"] == {"rollout": {"seconds": 6.0}, "train": {"seconds": 1.0}}
    assert rec["step_time_s"] == 3.5 and rec["steps"] == 2
    assert not {"peak_mem_mb", "threads", "fp8_gemms"} & set(rec)
    empty = throughput_record([], emulated=False, device="cuda", fp8_backend="none")
    assert empty["step_time_s"] is None and empty["phases"] == {} and empty["steps"] == 0
    assert set(PHASES) == {"rollout", "logprob", "train", "calib"}


BF16_ROWS = [
    {"step": 1, "clip/low_all": 0.1, "clip/high_all": 0.02, "clip/low_neg": 0.3, "clip/high_pos": 0.05},
    {"step": 2, "reward/mean": 0.5},
    {"step": 3, "clip/low_all": 0.3, "clip/low_neg": 0.1},
]


def test_reference_targets_by_step_read_the_bf16_clip_fractions(tmp_path):
    ref = _metrics(tmp_path / "bf16", BF16_ROWS)
    assert reference_targets_by_step(ref, "all") == {1: (0.1, 0.02), 3: (0.3, None)}
    assert reference_targets_by_step(ref, "neg") == {1: (0.3, 0.05), 3: (0.1, None)}
    with pytest.raises(ValueError, match=r"nope: no metrics.jsonl"):
        reference_targets_by_step(tmp_path / "nope", "all")
    bad = _metrics(tmp_path / "bad", [{"step": 1, "reward/mean": 0.5}])
    with pytest.raises(ValueError, match=r"bad/metrics.jsonl: no step records 'clip/low_all'"):
        reference_targets_by_step(bad, "all")


def test_a_failed_metrics_append_leaves_no_half_line(tmp_path, monkeypatch):
    """A full disk mid-append (ENOSPC after part of the line): the file is cut back to the last whole
    step, so a summary written after the crash agrees with it."""
    import errno
    import os

    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    run.append_metrics({"step": 1, "reward/mean": 0.5})
    size = run.metrics_size()
    real = os.write

    def full_disk(fd, data):
        if len(data) > 4:
            return real(fd, bytes(data[:4]))  # part of the line lands
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        run.append_metrics({"step": 2, "reward/mean": 0.6})
    monkeypatch.undo()
    assert run.metrics_size() == size and [r["step"] for r in run.read_metrics()] == [1]
    assert run.append_metrics({"step": 2, "reward/mean": 0.6}) == run.metrics_size()
    assert [r["step"] for r in run.read_metrics()] == [1, 2]


def test_metrics_appends_do_not_follow_a_symlink(tmp_path):
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("")
    run.metrics.symlink_to(target)
    with pytest.raises(OSError):
        run.append_metrics({"step": 1})
    assert target.read_text() == ""


def test_the_curves_hint_names_the_folder_the_run_was_written_to(tmp_path):
    """`fp8rl train --out` elsewhere than the config's runs folder: the TensorBoard hint names `--out`."""
    from fp8rl.commands.train import curves_command
    from fp8rl.config_loader import load_config

    smoke = Path(__file__).resolve().parents[2] / "config" / "smoke.yaml"
    cfg = load_config(smoke, [f"results_dir={tmp_path / 'results'}"])
    inside = tmp_path / "results" / cfg.tier / "runs" / "grpo" / "tiny" / "bf16" / "none" / "seed0"
    assert curves_command(cfg, inside) == f"tensorboard --logdir {tmp_path / 'results' / cfg.tier / 'runs'}"
    assert curves_command(cfg, tmp_path / "elsewhere") == f"tensorboard --logdir {tmp_path / 'elsewhere'}"
