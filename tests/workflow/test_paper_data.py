"""The paper DAG's non-GPU jobs for real, on a local directory standing in for the hub: fetch the
datasets and every model into the shared cache, convert DAPO-Math-17k, then plan only the GPU jobs and
write one verl run's inputs (its job script not run). Plus the Slurm plan: no container runtime needed."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from workflow_helpers import REPO, planned_jobs, snakemake, write_config

from fp8rl.cli import main
from fp8rl.config_loader import load_config
from fp8rl.io import read_jsonl
from tests.hub_fixtures import make_hub

PAPER = REPO / "config" / "paper.yaml"


@pytest.mark.slow
def test_paper_data_and_models_run_for_real(tmp_path, monkeypatch):
    cfg0 = load_config(PAPER)
    mirror = make_hub(tmp_path / "mirror", models=tuple(m.hf_id for m in cfg0.models))
    monkeypatch.setenv("FP8RL_HUB_MIRROR", str(mirror))
    results, hf = tmp_path / "results", tmp_path / "hf"
    cfg = write_config(
        tmp_path / "paper.yaml", "config/paper.yaml", f"results_dir={results}", f"hub.home={hf}",
        "containers.mode=none", "task.n_test=3", "task.n_train=100",
    )  # fmt: skip
    snakemake(tmp_path, "--cores", "1", "--configfile", str(cfg), "--until", "data", "fetch_model")

    R = results / "paper"
    assert (
        len(read_jsonl(R / "data" / "train.jsonl")) == 9 and len(read_jsonl(R / "data" / "test.jsonl")) == 3
    )
    for m in cfg0.models:
        rec = json.loads((R / "base" / m.name / "model.json").read_text())
        assert rec["repo_id"] == m.hf_id and Path(rec["path"]).is_relative_to(hf / "hub")
        assert (Path(rec["path"]) / "config.json").is_file()
    # what is left needs GPUs: training, evaluation and the report after them
    n = len(cfg0.runs())
    assert planned_jobs(tmp_path, "--configfile", str(cfg)) == {
        "train": n, "eval": n, "report": 1, "all": 1  # containers off: a run's suites in one job
    }  # fmt: skip

    # a train job's inputs and job script, offline: the hub is gone
    shutil.rmtree(mirror)
    monkeypatch.delenv("FP8RL_HUB_MIRROR")
    out = R / "runs" / "dapo" / "qwen3-8b" / "fp8" / "tensorwise" / "seed0"
    args = ["verl", "train", "--config", str(cfg), "--run", "dapo/qwen3-8b/fp8/tensorwise/seed0",
            "--base", str(R / "base" / "qwen3-8b"), "--data", str(R / "data"), "--out", str(out), "--dry-run"]  # fmt: skip
    assert main(args) == 0
    ov = json.loads((out / "verl_overrides.json").read_text())
    snapshot = json.loads((R / "base" / "qwen3-8b" / "model.json").read_text())["path"]
    assert f"actor_rollout_ref.model.path={snapshot}" in ov["overrides"]
    assert "algorithm.filter_groups.max_inflight_gen_batches=4" in ov["overrides"]
    assert any("128x128" in d for d in ov["deviations"])  # tensorwise cell, blockwise rollout
    assert (out / "verl_data" / "train.parquet").is_file()


def test_paper_plans_on_slurm_without_a_container_runtime(tmp_path):
    """No `apptainer` on PATH: Snakemake itself never runs a container, the rules enter their images."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    path = os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "apptainer").exists()
    )
    env_path = os.environ["PATH"]
    os.environ["PATH"] = path
    try:
        proc = snakemake(
            None, "--profile", str(REPO / "profiles" / "slurm"), "--configfile", str(PAPER), "-n", "-p",
            "--directory", str(REPO), "--config", f"results_dir={tmp_path}",
        )  # fmt: skip
    finally:
        os.environ["PATH"] = env_path
    jobs = re.split(r"\n\[[^\]]+\]\n", proc.stdout)  # one chunk per job, from its timestamp line
    data = next(j for j in jobs if j.startswith("rule data:"))
    assert "slurm_partition=cpu" in data and "apptainer exec --nv" in data and "HF_HUB_OFFLINE=1" in data
    train = next(j for j in jobs if j.startswith("rule train:"))
    assert "slurm_partition=gpu" in train and "runtime=720" in train
    fetch = next(j for j in jobs if j.startswith("rule fetch_model:"))
    assert "apptainer" not in fetch and "slurm_partition" not in fetch


def test_downloads_and_image_builds_are_local_rules():
    """Only the login node reaches the hub and a container engine: those rules never become Slurm jobs."""
    text = "".join((REPO / "workflows" / f).read_text() for f in ("data.smk", "containers.smk"))
    local = set()
    for block in re.findall(r"^localrules:\n((?:    \w+,\n)+)", text, flags=re.M):
        local |= set(re.findall(r"(\w+),", block))
    assert local == {"fetch_data", "fetch_model", "container_image", "container_sif", "containers"}
