"""The DAG on a real Slurm cluster, through `profiles/slurm` and the Slurm executor plugin: a training job
whose Slurm time limit (one minute) is shorter than its training (two to four) is stopped by Slurm,
resubmitted by the DAG's retry, and resumes from the checkpoint it wrote on Slurm's SIGTERM, with the
metrics of a run that never stopped; a job that fails for good runs once per submission.

Needs a cluster: `sudo scripts/local_slurm.sh start` starts one on this machine (scripts/ci_slurm.sh, which
.ci/run calls, starts it and runs this file). The cluster tests skip when `sinfo` does not answer, unless
FP8RL_SLURM_REQUIRED=1 (then they fail); FP8RL_SLURM_PARTITION / FP8RL_SLURM_ACCOUNT name the partition
and account (default `cpu` / `fp8rl`, the local cluster's)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from workflow_helpers import REPO, SNAKEFILE, snakemake, write_config

PARTITION = os.environ.get("FP8RL_SLURM_PARTITION", "cpu")
ACCOUNT = os.environ.get("FP8RL_SLURM_ACCOUNT", "fp8rl")
RUN_ID = "grpo/tiny/bf16/none/seed0"
STEPS = 400  # 0.5-1.2 s a step on a 2-core Xeon: 3-8 min of training against a 1-minute limit, which
# slurmctld enforces up to a minute or so late: at 200 steps an idle machine once finished before the kill


def _cluster_problem() -> str | None:
    if shutil.which("sinfo") is None:
        return "no Slurm client (sinfo); `sudo scripts/local_slurm.sh start` sets up a one-node cluster"
    proc = subprocess.run(["sinfo", "-h", "-p", PARTITION, "-o", "%T"], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        return f"no Slurm partition {PARTITION!r} answers sinfo: {proc.stderr.strip() or 'no node'}"
    return None


@pytest.fixture(scope="module")
def cluster():
    problem = _cluster_problem()
    if problem is not None:
        if os.environ.get("FP8RL_SLURM_REQUIRED") == "1":
            pytest.fail(f"FP8RL_SLURM_REQUIRED=1 but {problem}")
        pytest.skip(problem)


def test_the_ci_tier_plans_on_slurm_with_the_configs_partition_and_account(tmp_path):
    """No cluster needed: config/ci_slurm.yaml after config/ci.yaml gives every job of the CI tier the
    partition and account (sbatch -p, -A) and its own results directory."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    proc = snakemake(
        None, "--profile", str(REPO / "profiles" / "slurm"), "-n", "-p", "--forceall", "--directory", str(REPO),
        "--configfile", str(REPO / "config" / "ci.yaml"), str(REPO / "config" / "ci_slurm.yaml"),
    )  # fmt: skip
    jobs = [j for j in re.split(r"\n\[[^\]]+\]\n", proc.stdout) if j.startswith("rule ")]
    rules = sorted({j.split(":")[0].removeprefix("rule ") for j in jobs} - {"all"})
    assert rules == ["data", "eval", "report", "sft", "train"]  # no images: a run's suites in one job
    for job in (j for j in jobs if not j.startswith("rule all:")):
        assert "slurm_partition=cpu" in job and "slurm_account=fp8rl" in job, job
        assert "results/ci_slurm/smoke/" in job, job


def _sacct_states(job_ids: list[str]) -> list[str]:
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-o", "JobIDRaw,State", "-j", ",".join(job_ids)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    states = dict(line.split("|", 1) for line in out.split())
    return [states.get(j, "?").split()[0] for j in job_ids]


def _dag(workdir: Path, config: Path) -> list[str]:
    """The Slurm profile's Snakemake on `config` in `workdir`, for the one training run's summary."""
    return [
        sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(workdir),
        "--profile", str(REPO / "profiles" / "slurm"), "--configfile", str(config),
        "--slurm-init-seconds-before-status-checks", "5", f"results/smoke/runs/{RUN_ID}/summary.json",
    ]  # fmt: skip


def _running_train_job(workdir: Path) -> str | None:
    """The Slurm id of the DAG in `workdir`'s running training job, if any (the executor submits with
    `-D` its working directory and a --comment that names the rule)."""
    out = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i|%k|%Z"], capture_output=True, text=True)
    for line in out.stdout.split():
        job, comment, where = line.split("|", 2)
        if comment.startswith("rule_train") and Path(where) == workdir:
            return job
    return None


@pytest.fixture(scope="module")
def time_limited(cluster, tmp_path_factory):
    """The DAG of one training run on the cluster, whose first training job gets a one-minute Slurm time
    limit (`scontrol update`, as a user may shorten their own job's) against 2-4 minutes of training;
    meanwhile the same run trains here without a limit. (workdir, DAG output, straight run dir)."""
    workdir = tmp_path_factory.mktemp("slurm_time_limit")
    config = write_config(
        workdir / "time_limit.yaml",
        "config/ci.yaml",
        "results_dir=results",
        "matrix.variants=[bf16]",
        f"schedule.steps={STEPS}",
        "schedule.checkpoint_every=50",
        "sft.steps=20",  # a rough base, and a small lr: a run that trains on to the last step
        "schedule.lr=1e-5",
        "stability.on_divergence=continue",
        f"resources.default={{partition: {PARTITION}, account: {ACCOUNT}}}",
        f"resources.train={{retries: 2, partition: {PARTITION}, account: {ACCOUNT}}}",
    )
    dag = subprocess.Popen(
        _dag(workdir, config), cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    straight = None
    try:
        deadline = time.time() + 1200  # it may queue behind other jobs
        while (job := _running_train_job(workdir)) is None:
            assert dag.poll() is None and time.time() < deadline, dag.stdout.read()
            time.sleep(0.5)
        subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=1"], check=True)
        r = workdir / "results" / "smoke"
        straight = subprocess.Popen(
            [sys.executable, "-m", "fp8rl.cli", "train", "--config", str(next((r / "config").glob("*.yaml"))),
             "--run", RUN_ID, "--base", str(r / "base" / "tiny"), "--data", str(r / "data"),
             "--out", str(workdir / "straight"), "--no-progress"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        output, _ = dag.communicate(timeout=1200)
        assert straight.wait(timeout=600) == 0, straight.stdout.read()
    finally:
        for proc in (dag, straight):
            if proc is not None and proc.poll() is None:
                proc.terminate()  # Snakemake's Slurm executor cancels its jobs
                proc.wait(timeout=120)
    assert dag.returncode == 0, output
    return workdir, config, output


@pytest.mark.slow
def test_a_job_past_its_time_limit_is_resubmitted_and_resumes_from_its_checkpoint(time_limited):
    workdir, _, output = time_limited
    run_dir = workdir / "results" / "smoke" / "runs" / RUN_ID
    log = workdir / "results" / "smoke" / "logs" / "train" / f"{RUN_ID}.log"
    # Two Slurm jobs trained the run: Slurm stopped the first at its limit, the DAG resubmitted it.
    train_jobs = re.findall(r"submitted with SLURM jobid (\d+) \(log: \S*/rule_train/", output)
    assert _sacct_states(train_jobs) == ["TIMEOUT", "COMPLETED"], output
    # The second job resumed from the checkpoint the first wrote on Slurm's SIGTERM.
    resumed = re.search(rf"\[{re.escape(RUN_ID)}\] resumed from its checkpoint at step (\d+)/{STEPS}",
                        log.read_text())  # fmt: skip
    assert resumed and 0 < int(resumed.group(1)) < STEPS, log.read_text()

    def rows(path: Path) -> list[dict]:
        lines = (path / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(x).items() if not k.startswith("time/")} for x in lines]

    got, want = rows(run_dir), rows(workdir / "straight")
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))
    assert got == want
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "ok"


@pytest.mark.slow
def test_a_job_that_fails_for_good_runs_once_per_submission(time_limited):
    """Bad input (exit 2) is resubmitted `retries` times, since Snakemake retries any failed job, but each
    Slurm job runs the command once: the job's own Snakemake does not retry it inside the job too."""
    workdir, config, _ = time_limited
    r = workdir / "results" / "smoke"
    (r / "runs" / RUN_ID / "summary.json").unlink()
    (r / "base" / "tiny" / "config.json").unlink()  # `fp8rl train` exits 2: not a model directory
    proc = subprocess.run(_dag(workdir, config), cwd=workdir, capture_output=True, text=True, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    train_jobs = re.findall(r"submitted with SLURM jobid (\d+) \(log: (\S*/rule_train/\S*)\)", output)
    assert len(train_jobs) == 3, output  # the first and `retries: 2` resubmissions
    assert _sacct_states([j for j, _ in train_jobs]) == ["FAILED"] * 3
    for _, slurm_log in train_jobs:
        text = Path(slurm_log).read_text()
        assert "Error in rule train:" in text and "Trying to restart" not in text, text
    assert "not a model directory (no config.json" in (r / "logs" / "train" / f"{RUN_ID}.log").read_text()
