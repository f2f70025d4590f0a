"""The DAG for real on a tiny config: killed mid-way (SIGKILL to Snakemake and its jobs), unlocked and
started again, it finishes without redoing the finished run, and the interrupted run resumes from its
checkpoint with every step exactly once; started once more, it has nothing to do, and a changed config
section plans only the rules that depend on it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from workflow_helpers import REPO, SNAKEFILE, planned_jobs, snakemake, write_config

from fp8rl.io import read_jsonl

TINY = [
    "matrix.variants=[bf16]",
    "matrix.seeds=[0, 1]",
    "task.n_train=256",
    "task.n_test=16",
    "sft.steps=10",
    "sft.batch_size=16",
    "schedule.steps=4",
    "schedule.prompts_per_step=4",
    "schedule.checkpoint_every=1",
    "eval.lm_eval_tasks=[]",  # the evaluators have their own tests and run in the CI DAG
    "eval.agent=[]",
]


def wait_for(predicate, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"snakemake ended (exit {proc.returncode}) before the kill point")
        if time.monotonic() > deadline:
            raise AssertionError("the kill point was not reached in time")
        time.sleep(0.2)


@pytest.mark.slow
def test_killed_dag_restarts_without_redoing_finished_runs(tmp_path):
    cfg = write_config(tmp_path / "tiny.yaml", "config/ci.yaml", "results_dir=results", *TINY)
    runs = tmp_path / "results" / "smoke" / "runs" / "grpo" / "tiny" / "bf16" / "none"
    first, second = runs / "seed0", runs / "seed1"
    args = ["--profile", str(REPO / "profiles" / "local"), "--cores", "1", "--configfile", str(cfg)]
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(tmp_path), *args]

    # One job at a time; kill everything once one run has finished and the other has checkpointed.
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        done = [first / "summary.json", second / "summary.json"]
        wait_for(
            lambda: (
                any(p.exists() for p in done)
                and any((p.parent / "checkpoint").exists() and not p.exists() for p in done)
            ),
            proc,
            300,
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finished = next(p for p in done if p.exists())
    interrupted = next(p for p in done if not p.exists())
    finished_mtime = finished.stat().st_mtime_ns

    # SIGKILL leaves Snakemake's lock behind (Ctrl-C does not): unlock, then the same command again.
    assert snakemake(tmp_path, *args, check=False).returncode != 0
    snakemake(tmp_path, "--unlock", "--configfile", str(cfg))
    end = snakemake(tmp_path, *args, timeout=300)
    # the profile's output: a line per job (its rule and command, no reasons or digest bookkeeping),
    # and at the end the comparison table and where the report is
    out = end.stdout + end.stderr
    assert ": train: fp8rl train --config " in out
    assert "Reason:" not in out and "printf '%s" not in out
    assert "comparison (results/smoke/tables/comparison.md):" in end.stdout
    assert "report:  results/smoke/report.html" in end.stdout

    assert finished.stat().st_mtime_ns == finished_mtime, "a finished run was trained again"
    rows = read_jsonl(interrupted.parent / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert (tmp_path / "results" / "smoke" / "report.html").is_file()
    # nothing changed: a rerun plans no job; a changed config section reruns only what depends on it
    assert planned_jobs(tmp_path, "--configfile", str(cfg)) == {}
    resources = write_config(tmp_path / "res.yaml", str(cfg), "resources.train.threads=2")
    assert planned_jobs(tmp_path, "--configfile", str(resources)) == {}
    lr = write_config(tmp_path / "lr.yaml", str(cfg), "schedule.lr=0.001")
    assert planned_jobs(tmp_path, "--configfile", str(lr)) == {"train": 2, "report": 1, "all": 1}
