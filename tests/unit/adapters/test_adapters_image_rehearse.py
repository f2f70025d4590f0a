"""A DAG job in its image's pinned packages (fp8rl.adapters.image_rehearse): the report job, run by the
cpu image's venv (scripts/image_venv.sh cpu -> build/venv-cpu; skipped without it), reproduces the
published CI tables, and a report of other runs does not."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from fp8rl.adapters import image_rehearse, image_venv
from fp8rl.adapters.image_rehearse import ROOT, report_job
from fp8rl.adapters.image_venv import venv_problem

VENV = ROOT / "build" / "venv-cpu"
CI_RESULTS = ROOT / "results" / "ci"


def _needs_venv_and_runs() -> None:
    if problem := venv_problem(VENV, "cpu"):
        pytest.skip(problem)
    if not (CI_RESULTS / "smoke" / "runs").is_dir():
        pytest.skip(f"no finished CI runs under {CI_RESULTS} (.ci/run makes them)")


def test_a_venv_not_built_from_the_current_lock_is_named(tmp_path):
    assert "make image-venvs IMAGE_VENVS=cpu, which runs scripts/image_venv.sh cpu" in venv_problem(
        tmp_path, "cpu"
    )
    (tmp_path / image_venv.LOCK_STAMP).write_text(hashlib.sha256(b"another lock").hexdigest() + "  x\n")
    assert "built from another containers/cpu/requirements.lock" in venv_problem(tmp_path, "cpu")
    lock = ROOT / "containers" / "cpu" / "requirements.lock"
    (tmp_path / image_venv.LOCK_STAMP).write_text(hashlib.sha256(lock.read_bytes()).hexdigest() + "  x\n")
    assert venv_problem(tmp_path, "cpu") is None


def test_a_venv_that_could_not_be_built_says_why(tmp_path):
    """make image-venvs logs each build; a test skipping for a missing venv names the build's last line."""
    venv = tmp_path / "venv-bfcl"
    (tmp_path / "venv-bfcl.log").write_text(
        "...\nerror: no python3.12 (the bfcl image's Python) on this machine\n\n"
    )
    problem = venv_problem(venv, "bfcl")
    assert "scripts/image_venv.sh bfcl" in problem and "error: no python3.12" in problem
    assert str(tmp_path / "venv-bfcl.log") in problem


def test_the_job_sees_the_images_environment_not_this_machines(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    env = image_venv.image_env(tmp_path / "venv", "cpu", tmp_path)
    assert env["PATH"].startswith(str(tmp_path / "venv" / "bin")) and env["HF_HUB_OFFLINE"] == "1"
    assert "PYTHONPATH" not in env and "OPENBLAS_CORETYPE" not in env


def test_the_eval_rehearsal_tells_ray_the_eval_nodes_gpus():
    """lm-eval's data-parallel vLLM replicas each ask Ray for TP GPUs; told the eval job's GPUs (as the
    node's Ray sees them), Ray schedules them here and each replica's vLLM reaches its GPU point."""
    import json

    paper = ROOT / "config" / "paper.yaml"
    env = image_rehearse.ray_node_env(paper, ["resources.eval.gpus=4"])
    assert json.loads(env["RAY_OVERRIDE_RESOURCES"]) == {"GPU": 4, "CPU": 16}


@pytest.mark.slow
def test_the_report_job_in_the_cpu_images_packages_reproduces_the_published_ci_tables(tmp_path):
    _needs_venv_and_runs()
    result = report_job(VENV, tmp_path)
    assert result.ok and not result.skipped, result.detail
    assert "byte for byte" in result.detail and "pandas" in result.detail


@pytest.mark.slow
def test_a_report_of_other_runs_fails_the_comparison(tmp_path):
    """The check has teeth: one run fewer, and the report's tables are not the published ones."""
    _needs_venv_and_runs()
    results = tmp_path / "ci"
    shutil.copytree(CI_RESULTS, results, symlinks=True)
    runs = sorted(p for p in (results / "smoke" / "runs").rglob("summary.json"))
    shutil.rmtree(runs[-1].parent)
    result = report_job(VENV, tmp_path / "work", results=results)
    assert not result.ok, result.detail
    assert isinstance(result.detail, str) and Path(tmp_path / "work").is_dir()


TRAIN_VENV = ROOT / "build" / "venv-train"
TF4 = ROOT / "build" / "tf4-venv" / "bin" / "python"


def _needs_train_venv() -> None:
    if problem := venv_problem(TRAIN_VENV, "train"):
        pytest.skip(problem)


@pytest.mark.slow
def test_the_data_job_in_the_train_images_packages_writes_this_machines_splits(tmp_path, monkeypatch):
    """DAPO-Math-17k shaped like the published parquet, from a stand-in hub (tests.hub_fixtures), fetched
    on this machine as the fetch_data rule does; the data job then runs in the train lock's packages."""
    _needs_train_venv()
    from fp8rl.cli import main
    from tests.hub_fixtures import make_hub

    monkeypatch.setenv("FP8RL_HUB_MIRROR", str(make_hub(tmp_path / "mirror", models=("Qwen/Qwen3-8B",))))
    sets = [f"hub.home={tmp_path / 'hf'}", "task.n_test=3", "task.n_train=100"]
    record = tmp_path / "data" / "hub.json"
    paper = str(ROOT / "config" / "paper.yaml")
    assert (
        main(
            [
                "fetch",
                "data",
                "--config",
                paper,
                *(a for s in sets for a in ("--set", s)),
                "--out",
                str(record),
            ]
        )
        == 0
    )
    result = image_rehearse.data_job(TRAIN_VENV, tmp_path / "work", record, sets)
    assert result.ok and not result.skipped, result.detail
    assert "'train.jsonl': 9" in result.detail and "pyarrow" in result.detail


@pytest.mark.slow
def test_the_export_in_the_train_images_packages_loads_in_the_bfcl_images_transformers(tmp_path):
    _needs_train_venv()
    if not TF4.is_file():
        pytest.skip(f"no {TF4} (make build/upstream)")
    from fp8rl.adapters.verl_rehearse import stand_in_model

    base = stand_in_model(tmp_path / "base", "qwen3")
    result = image_rehearse.export_job(TRAIN_VENV, tmp_path / "work", base, TF4)
    assert result.ok and not result.skipped, result.detail
    assert "transformers 5.9.0" in result.detail  # verl's tokenizer saved by the train image's transformers
    # the check has teeth: the save as that transformers wrote it, not exported, does not load there
    import subprocess

    from fp8rl.adapters.verl_checkpoint import HF_SUBDIR

    raw = tmp_path / "work" / "verl_save" / "actor" / HF_SUBDIR
    res = subprocess.run(
        [str(TF4), "-c", image_rehearse.EXPORT_LOAD, str(raw)], capture_output=True, text=True
    )
    assert res.returncode != 0 and "TokenizersBackend does not exist" in res.stderr


EVAL_VENV = ROOT / "build" / "venv-eval"


@pytest.mark.slow
@pytest.mark.parametrize("eval_sets", [True, False])
def test_the_eval_lm_job_in_the_eval_images_packages_reaches_vllms_gpu(tmp_path, monkeypatch, eval_sets):
    """The paper tier's data from a stand-in hub, a stand-in checkpoint: the eval job in the eval lock's
    packages (lm-eval, the CUDA builds of torch and vLLM) stops only where vLLM needs a GPU; with eval
    sets lm-eval cannot build a task from (the stand-in hub's one-line placeholders) it stops before."""
    if problem := venv_problem(EVAL_VENV, "eval"):
        pytest.skip(problem)
    from fp8rl.adapters.rehearsal_stand_ins import stand_in_hub, stand_in_model
    from fp8rl.cli import main

    # the four paper eval sets in their hub layouts, or a one-line placeholder each
    mirror = stand_in_hub(tmp_path / "mirror", models=("Qwen/Qwen3-8B",), model_files="placeholder",
                          eval_sets="hub" if eval_sets else "placeholder")  # fmt: skip
    monkeypatch.setenv("FP8RL_HUB_MIRROR", str(mirror))
    sets = [f"hub.home={tmp_path / 'hf'}", "task.n_test=3", "task.n_train=100"]
    flags = [a for s in sets for a in ("--set", s)]
    data, paper = tmp_path / "data", str(ROOT / "config" / "paper.yaml")
    assert main(["fetch", "data", "--config", paper, *flags, "--out", str(data / "hub.json")]) == 0
    assert main(["data", "--config", paper, *flags, "--out", str(data), "--hub", str(data / "hub.json")]) == 0
    checkpoint = stand_in_model(tmp_path / "checkpoint", "qwen3")
    (checkpoint / "model.safetensors").write_bytes(b"")
    result = image_rehearse.eval_lm_job(EVAL_VENV, tmp_path / "work", checkpoint, data, sets)
    if not eval_sets:
        assert not result.ok and "cannot build the task" in result.detail, result.detail
        return
    assert result.ok and not result.skipped, result.detail
    assert "vllm 0.24.0" in result.detail and "Device string must not be empty" in result.detail


BFCL_VENV = ROOT / "build" / "venv-bfcl"


@pytest.mark.slow
@pytest.mark.parametrize("tokenizer", ["exported", "transformers5"])
def test_the_eval_agent_job_in_the_bfcl_images_packages_loads_the_checkpoint_and_reaches_vllms_gpu(
    tmp_path, monkeypatch, tokenizer
):
    """The paper tier's data from a stand-in hub and a checkpoint as the export writes it (the base
    model's tokenizer): the agent eval in the bfcl lock's packages (bfcl-eval, transformers 4.51.3, the
    CUDA builds of torch and vLLM 0.8.5) loads it through bfcl-eval's handler and stops only where `vllm
    serve` needs a GPU, and with vLLM's server stood in runs to its end; with the tokenizer config
    transformers 5 writes (`extra_special_tokens` a list) it stops before, in the handler."""
    if problem := venv_problem(BFCL_VENV, "bfcl"):
        pytest.skip(problem)
    import json

    from fp8rl.adapters.verl_rehearse import stand_in_model
    from fp8rl.cli import main
    from tests.hub_fixtures import make_hub

    monkeypatch.setenv("FP8RL_HUB_MIRROR", str(make_hub(tmp_path / "mirror", models=("Qwen/Qwen3-8B",))))
    sets = [f"hub.home={tmp_path / 'hf'}", "task.n_test=3", "task.n_train=100"]
    flags = [a for s in sets for a in ("--set", s)]
    data, paper = tmp_path / "data", str(ROOT / "config" / "paper.yaml")
    assert main(["fetch", "data", "--config", paper, *flags, "--out", str(data / "hub.json")]) == 0
    assert main(["data", "--config", paper, *flags, "--out", str(data), "--hub", str(data / "hub.json")]) == 0
    from fp8rl.run_files import RunDir

    run = RunDir(tmp_path / "runs" / "grpo" / "qwen3-8b" / "fp8_tis" / "blockwise" / "seed0")
    checkpoint = stand_in_model(run.checkpoint, "qwen3")  # the run's summary names its model
    (checkpoint / "model.safetensors").write_bytes(b"")
    run.summary.write_text(json.dumps({"run_id": "grpo/qwen3-8b/fp8_tis/blockwise/seed0"}))
    if tokenizer == "transformers5":
        config = json.loads((checkpoint / "tokenizer_config.json").read_text())
        config["extra_special_tokens"] = ["<|im_start|>", "<|im_end|>"]
        (checkpoint / "tokenizer_config.json").write_text(json.dumps(config))
    from fp8rl.adapters.image_rehearse_agent import eval_agent_job

    result = eval_agent_job(BFCL_VENV, tmp_path / "work", checkpoint, data, sets)
    if tokenizer == "transformers5":
        assert not result.ok and "'list' object has no attribute 'keys'" in result.detail, result.detail
        return
    assert result.ok and not result.skipped, result.detail
    assert "bfcl-eval 2026.3.23" in result.detail and "vllm 0.8.5" in result.detail
    assert "Max context length: " in result.detail and "Failed to infer device type" in result.detail
    # past the GPU point (vLLM's server stood in): every category generated, scored and read
    assert "bfcl_simple n=400, bfcl_multiple n=200, bfcl_parallel n=200" in result.detail
