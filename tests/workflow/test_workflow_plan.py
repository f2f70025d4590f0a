"""Dry runs of the DAG: the job counts of every tier match `fp8rl matrix`, calibrated runs with
`calib.reference: run` depend on their bf16 run, a bad config stops the DAG with the CLI's message,
and `snakemake --lint` has nothing to say about the rules."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from functools import partial

import pytest
import yaml
from workflow_helpers import REPO, in_repo, planned_jobs, snakemake, write_config

from fp8rl.config.runs import reference_run
from fp8rl.config_loader import load_config
from fp8rl.containers import run_prefix
from fp8rl.evaluate.suites import eval_jobs


def matrix_count(config_file) -> int:
    out = subprocess.run(
        [sys.executable, "-m", "fp8rl.cli", "matrix", str(config_file), "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)["count"]


@pytest.mark.parametrize("config", ["config/paper.yaml", None, "config/ci.yaml", "config/verl_smoke.yaml"])
def test_dry_run_plans_every_job_of_the_matrix(config, tmp_path):
    """None: no --configfile, the default (config/smoke.yaml)."""
    cfg = load_config(REPO / (config or "config/smoke.yaml"))
    n = matrix_count(REPO / (config or "config/smoke.yaml"))
    jobs = planned_jobs(None, *(["--configfile", str(REPO / config)] if config else []), *in_repo(tmp_path))
    assert jobs.pop("train") == n
    # one evaluation job per run and image: every suite in one `eval` job on the host (smoke, ci), one
    # job per suite's image with containers (paper, verl_smoke: eval_lm, eval_agent)
    evals = eval_jobs(cfg, partial(run_prefix, cfg))
    host = [job.rule for job in evals if not run_prefix(cfg, job.role)]
    assert host == (["eval"] if cfg.containers.mode == "none" else [])
    assert {job.rule: jobs.pop(job.rule) for job in evals} == {job.rule: n for job in evals}
    assert sorted(s.name for job in evals for s in job.suites) == sorted(
        name for name, on in (("lm_eval", cfg.eval.lm_eval_tasks), ("agent", cfg.eval.agent)) if on
    )
    hf = [m for m in cfg.matrix.models if cfg.model(m).source == "hf" and cfg.backend == "verl"]
    # scratch models are trained (sft: one per model, or per model and base seed with sft.per_seed), verl's
    # hub models fetched with the datasets (login node), other pretrained models loaded and re-saved
    scratch = [m for m in cfg.matrix.models if cfg.model(m).source == "scratch"]
    bases = len(scratch) * len({cfg.sft.base_seed(s) for s in cfg.matrix.seeds})
    assert jobs.pop("sft", 0) == bases
    assert jobs.pop("base_model", 0) == len(cfg.matrix.models) - len(hf) - len(scratch)
    assert jobs.pop("fetch_model", 0) == len(hf) and jobs.pop("fetch_data", 0) == (1 if hf else 0)
    images = {k: v for k, v in jobs.items() if k.startswith("container")}  # workflows/containers.smk
    assert bool(images) == (cfg.containers.mode != "none")
    assert {k: v for k, v in jobs.items() if k not in images} == {"data": 1, "report": 1, "all": 1}


def test_paper_train_jobs_go_through_verl_on_whole_nodes(tmp_path):
    """backend: verl -> `fp8rl verl train`, Slurm resources = the model's nodes x gpus_per_node."""
    cfg = load_config(REPO / "config/paper.yaml")
    args = ("-n", "-p", "--configfile", str(REPO / "config/paper.yaml"), *in_repo(tmp_path))
    out = snakemake(None, *args).stdout
    jobs = [block for block in out.split("\n\n") if "rule train:" in block]
    assert len(jobs) == len(cfg.runs())
    for block in jobs:
        model = cfg.model(re.search(r"model=([^,\s]+)", block).group(1))
        resources = re.search(r"resources: (.*)", block).group(1)
        assert f"nodes={model.nodes}" in resources and f"gres=gpu:{model.gpus_per_node}" in resources
        assert "gpu=" not in resources.replace("gres=gpu:", "")
        assert "fp8rl verl train --config" in block
        assert "--on-failure raise" in block  # `record` on the last attempt: a failed run keeps its summary


def test_calibrated_runs_take_their_bf16_run_as_input(tmp_path):
    cfg_file = write_config(tmp_path / "cfg.yaml", "config/smoke.yaml", "calib.reference=run")
    cfg = load_config(cfg_file)
    out = snakemake(tmp_path, "-n", "-p", "--configfile", str(cfg_file)).stdout
    jobs = [block for block in out.split("\n\n") if "rule train:" in block]
    assert len(jobs) == len(cfg.runs())
    for spec in cfg.runs():
        block = next(b for b in jobs if f"runs/{spec.run_id}/summary.json\n" in b + "\n" and "output:" in b)
        inputs = re.search(r"input: (.*)", block).group(1)
        ref = f"runs/{reference_run(spec).run_id}/summary.json"
        if spec.spec.calib:
            assert ref in inputs and f"--reference results/smoke/runs/{reference_run(spec).run_id}" in block
        else:
            assert "--reference" not in block and (spec.variant == "bf16" or ref not in inputs)
    # with the default shadow reference no run waits for another
    plain = snakemake(tmp_path, "-n", "-p", "--configfile", str(REPO / "config/smoke.yaml")).stdout
    assert "--reference" not in plain


def test_bad_config_stops_the_dag_with_the_cli_message(tmp_path):
    cfg_file = write_config(tmp_path / "bad.yaml", "config/ci.yaml", "matrix.variants=[bf16, fp9]")
    proc = snakemake(tmp_path, "-n", "--configfile", str(cfg_file), check=False)
    assert proc.returncode == 2
    cli = subprocess.run(
        [sys.executable, "-m", "fp8rl.cli", "config", "validate", str(cfg_file)],
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 2
    problem = next(line for line in cli.stderr.splitlines() if "matrix.variants" in line)
    assert problem.split(": ", 1)[1] in proc.stderr
    assert "Traceback" not in proc.stderr


def lints(tmp_path, config) -> list[tuple[str, str]]:
    """`snakemake --lint` findings as (where, title)."""
    proc = snakemake(None, "--lint", "--configfile", str(REPO / config), *in_repo(tmp_path), check=False)
    found, where = [], None
    for line in (proc.stdout + proc.stderr).splitlines():
        if line.startswith("Lints for "):
            where = line.removeprefix("Lints for ").rstrip(":")
        elif line.strip().startswith("* ") and where is not None:
            found.append((where, line.strip()[2:].rstrip(":").rstrip(".")))
    assert found or "Congratulations" in proc.stdout + proc.stderr, proc.stderr  # the lint really ran
    return found


@pytest.mark.parametrize("config", ["config/paper.yaml", "config/smoke.yaml"])
def test_lint_is_clean(config, tmp_path):
    """Nothing about paths, params, logs, structure or software: host-run rules name the conda env."""
    assert lints(tmp_path, config) == []


def test_the_conda_env_installs_this_repository():
    env = yaml.safe_load((REPO / "workflows/envs/fp8rl.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    editable = next(p.split()[-1] for p in pip if p.startswith("-e"))
    assert (REPO / "workflows/envs" / editable / "pyproject.toml").resolve() == REPO / "pyproject.toml"


def test_dry_run_writes_nothing(tmp_path):
    """Planning only: no resolved config (or anything else) under results_dir."""
    out = tmp_path / "out"
    cfg_file = write_config(tmp_path / "cfg.yaml", "config/ci.yaml", f"results_dir={out}")
    assert planned_jobs(tmp_path / "work", "--configfile", str(cfg_file))["train"] > 0
    assert not out.exists()


def test_every_shell_command_quotes_its_paths(tmp_path):
    """Each `{...}` placeholder in a rule's shell command is shell-quoted (`:q`), and the planned
    commands of a run whose results_dir needs no quoting still read as before."""
    for smk in sorted((REPO / "workflows").glob("*.smk")):
        text = smk.read_text()
        for block in re.findall(r"shell:\n((?:\s+.*\"\n?)+)", text):
            fields = re.findall(r"\{([^{}]*)\}", block)
            assert fields, f"{smk.name}: no placeholders in {block!r}"
            unquoted = [f for f in fields if not f.endswith(":q")]
            assert not unquoted, f"{smk.name}: unquoted {unquoted} in {block!r}"
    cfg_file = write_config(tmp_path / "cfg.yaml", "config/ci.yaml", "calib.reference=run")
    out = snakemake(tmp_path, "-n", "-p", "--configfile", str(cfg_file)).stdout
    assert "--reference results/ci/smoke/runs/grpo/tiny/bf16/none/seed0 --no-progress" in out
    assert "fp8rl data --config results/ci/smoke/config/" in out


def test_shell_metacharacters_in_results_dir_stop_the_dag(tmp_path):
    marker = tmp_path / "pwned"
    cfg_file = write_config(tmp_path / "cfg.yaml", "config/ci.yaml", f"results_dir=$(touch {marker})")
    proc = snakemake(tmp_path, "--until", "data", "--cores", "1", "--configfile", str(cfg_file), check=False)
    assert proc.returncode == 2 and "results_dir" in proc.stderr and "not a safe path" in proc.stderr
    assert not marker.exists() and not list(tmp_path.glob("$*"))


@pytest.mark.parametrize(("overrides", "runs"), [((), 42), (("config/small_cpu.yaml",), 2)])
def test_small_tier_plans_a_pretrained_base_and_no_sft(overrides, runs, tmp_path):
    """The one-GPU command, and with the CPU override file merged in (its first steps)."""
    files = [str(REPO / "config/small.yaml"), *(str(REPO / f) for f in overrides)]
    jobs = planned_jobs(None, "--configfile", *files, *in_repo(tmp_path))
    assert jobs.pop("train") == jobs.pop("eval") == runs  # lm-eval and the agent benchmark, one process
    assert jobs == {"data": 1, "base_model": 1, "report": 1, "all": 1}
