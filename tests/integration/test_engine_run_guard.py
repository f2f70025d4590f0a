"""`fp8rl train` guards its run directory: one writer at a time, and no resume over a damaged history.
Both refusals exit 2 before any work, with the file named and what to do, and change nothing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

RUN_ID = "grpo/tiny/bf16/none/seed0"


def _train_args(tier, config: Path, out: Path, run_id: str = RUN_ID) -> list[str]:
    root, *_ = tier
    return ["train", "--config", str(config), "--run", run_id, "--base", str(root / "base" / "tiny"),
            "--data", str(root / "data"), "--out", str(out), "--no-progress"]  # fmt: skip


def _main(args: list[str], capsys) -> tuple[int, str]:
    from fp8rl.cli import main

    code = main(args)
    return code, capsys.readouterr().err


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_second_trainer_on_one_run_directory_exits_2_naming_the_first(tier, tmp_path, capsys):
    write_config = tier[2]
    config = write_config(tmp_path / "c.yaml", {"schedule.steps": 200})
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "fp8rl.cli", *_train_args(tier, config, out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.time() + 120
        while not (out / "run.lock").is_file() or not (out / "run.lock").read_text():
            assert first.poll() is None and time.time() < deadline, first.stderr.read()
            time.sleep(0.02)
        before = (out / "metrics.jsonl").read_bytes() if (out / "metrics.jsonl").exists() else None
        code, err = _main(_train_args(tier, config, out), capsys)
        assert code == 2, err
        assert f"pid {first.pid}" in err and str(out) in err and "already in use" in err
        after = (out / "metrics.jsonl").read_bytes() if (out / "metrics.jsonl").exists() else None
        assert after is None or before is None or after.startswith(before)  # the first run's file, untouched
        assert first.poll() is None  # the first trainer carries on
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()


@pytest.fixture(scope="module")
def finished(tier, tmp_path_factory):
    """A finished 2-step run with a checkpoint after each step."""
    import torch

    from fp8rl.config.runs import find_run
    from fp8rl.config_loader import load_config
    from fp8rl.engine.trainer import Trainer

    root, _, write_config = tier
    tmp = tmp_path_factory.mktemp("guard")
    config = write_config(tmp / "c.yaml", {"schedule.steps": 2, "schedule.checkpoint_every": 1})
    cfg = load_config(config)
    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    Trainer(cfg, find_run(cfg, RUN_ID), base_dir=root / "base" / "tiny", data_dir=root / "data",
            out_dir=tmp / "run", progress=False).run()  # fmt: skip
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(det)
    return config, tmp / "run"


def _damaged(finished, tmp_path: Path, damage) -> Path:
    _, run = finished
    out = tmp_path / "run"
    shutil.copytree(run, out)
    damage(out / "metrics.jsonl")
    return out


def _corrupt_first_line(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(b"\xff\xfe" + data[2:])


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (Path.unlink, "metrics.jsonl: missing, but the checkpoint in"),
        (_corrupt_first_line, "metrics.jsonl:1: corrupt (expected the JSON record of step 1)"),
        (lambda p: p.write_bytes(p.read_bytes()[:10]), "metrics.jsonl: 10 bytes, shorter than the"),
    ],
    ids=["deleted", "corrupt", "cut"],
)
def test_resume_over_a_damaged_history_exits_2_and_says_what_to_do(
    tier, finished, tmp_path, capsys, damage, says
):
    config, _ = finished
    out = _damaged(finished, tmp_path, damage)
    before = _snapshot(out)
    code, err = _main(_train_args(tier, config, out), capsys)
    assert code == 2, err
    assert says in err and f"delete the run directory {out} to start the run afresh" in err
    assert _snapshot(out) == before  # nothing recreated, nothing rewritten
    assert not (out / "run.lock").exists()


def test_resume_with_an_intact_history_still_works(tier, finished, tmp_path, capsys, restore_torch_globals):
    config, run = finished
    out = tmp_path / "run"
    shutil.copytree(run, out)
    (out / "summary.json").unlink()  # what Snakemake does before it reruns the job
    with open(out / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 3, "rew')  # a line cut by a kill after the last checkpoint: resuming drops it
    code, err = _main(_train_args(tier, config, out), capsys)
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["step"] == 2
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert not (out / "run.lock").exists()


@pytest.mark.parametrize("left", ["summary", "run.json"], ids=["finished", "killed-before-its-checkpoint"])
def test_another_runs_directory_is_refused_and_left_as_it_was(tier, finished, tmp_path, capsys, left):
    """Its checkpoint gone, a finished run's directory still names its run (summary.json, run.json); a
    trainer of another run on it exits 2 instead of overwriting its metrics and summary."""
    config, run = finished
    out = tmp_path / "run"
    shutil.copytree(run, out)
    shutil.rmtree(out / "checkpoint")
    if left == "run.json":
        (out / "summary.json").unlink()
        (out / "run.json").write_text(json.dumps({"run_id": RUN_ID}))
    before = _snapshot(out)
    other = "grpo/tiny/fp8/tensorwise/seed0"
    code, err = _main(_train_args(tier, config, out, other), capsys)
    assert code == 2, err
    named = "summary.json" if left == "summary" else "run.json"
    assert f"another run's directory ({out / named}: belongs to run {RUN_ID!r}, not {other!r})" in err
    assert _snapshot(out) == before and not (out / "run.lock").exists()


def test_a_symlinked_metrics_file_is_not_resumed_through(tier, finished, tmp_path, capsys):
    config, run = finished
    out = tmp_path / "run"
    shutil.copytree(run, out)
    (out / "summary.json").unlink()
    elsewhere = tmp_path / "someone_elses.jsonl"
    shutil.move(out / "metrics.jsonl", elsewhere)
    (out / "metrics.jsonl").symlink_to(elsewhere)
    before = elsewhere.read_bytes()
    code, err = _main(_train_args(tier, config, out), capsys)
    assert code == 2, err
    assert "metrics.jsonl: a symbolic link" in err and "would append to the file it points to" in err
    assert elsewhere.read_bytes() == before


def test_a_resumed_run_claims_its_directory_and_clears_killed_writers_temp_files(
    tier, finished, tmp_path, capsys, restore_torch_globals
):
    config, run = finished
    out = tmp_path / "run"
    shutil.copytree(run, out)
    (out / "summary.json").unlink()
    (out / ".summary.json.k1ll3d.tmp").write_text('{"run_id": "grpo/tiny/bf16/none/seed0", "sta')
    code, err = _main(_train_args(tier, config, out), capsys)
    assert code == 0, err
    assert json.loads((out / "run.json").read_text()) == {"run_id": RUN_ID}
    assert not list(out.glob(".*.tmp"))
