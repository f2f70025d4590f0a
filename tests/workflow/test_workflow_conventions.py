"""Snakemake conventions: `snakemake --report` on a finished tiny tier gives Snakemake's own report with
the tables, figures and report.html registered; the conda env pins every package it installs."""

from __future__ import annotations

import re
import tomllib
import zipfile

import pytest
import yaml
from packaging.requirements import Requirement
from workflow_helpers import REPO, snakemake, write_config

from fp8rl.report.paths import PLOTS, TABLES

TINY = [
    "matrix.variants=[bf16]",
    "matrix.seeds=[0]",
    "task.n_train=128",
    "task.n_test=8",
    "sft.steps=5",
    "sft.batch_size=16",
    "schedule.steps=2",
    "schedule.prompts_per_step=4",
    "eval.lm_eval_tasks=[]",  # the evaluators have their own tests and run in the CI DAG
    "eval.agent=[]",
]


@pytest.mark.slow
def test_snakemake_report_registers_the_tables_plots_and_html(tmp_path):
    cfg = write_config(tmp_path / "tiny.yaml", "config/ci.yaml", "results_dir=results", *TINY)
    args = ["--profile", str(REPO / "profiles" / "local"), "--cores", "1", "--configfile", str(cfg)]
    snakemake(tmp_path, *args, timeout=600)
    assert (tmp_path / "results" / "smoke" / "report.html").is_file()

    snakemake(tmp_path, "--configfile", str(cfg), "--report", "snakemake-report.zip", timeout=300)
    with zipfile.ZipFile(tmp_path / "snakemake-report.zip") as z:
        names = z.namelist()
        page = z.read("snakemake-report/report.html").decode()  # Snakemake's page; ours is under data/
    stored = {n.rsplit("/", 1)[-1] for n in names}
    assert {f"{t}.csv" for t in TABLES} <= stored, names
    assert {f"{p}.png" for p in PLOTS} <= stored, names
    assert "report.html" in stored
    assert not any(n.endswith(".svg") for n in names)  # the PNGs are registered, not their SVG copies
    # the categories, a caption and the workflow description
    for text in ("Tables", "Plots", "fp8rl report", "phantom clipping", "one tier of the fully-FP8 RL"):
        assert text in page, text


def _pins(env_file) -> dict[str, Requirement]:
    env = yaml.safe_load(env_file.read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    reqs = [Requirement(line) for line in pip if not line.startswith("-e")]
    return {re.sub(r"[-_.]+", "-", r.name.lower()): r for r in reqs}


def test_the_conda_env_pins_every_runtime_dependency_within_pyproject():
    env_file = REPO / "workflows/envs/fp8rl.yaml"
    env = yaml.safe_load(env_file.read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    assert all(re.fullmatch(r"[\w-]+=[\d.]+", d) for d in conda), conda  # python=3.11.7, pip=...
    pins = _pins(env_file)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for line in project["dependencies"]:
        dep = Requirement(line)
        pin = pins.get(re.sub(r"[-_.]+", "-", dep.name.lower()))
        assert pin is not None, f"workflows/envs/fp8rl.yaml does not pin {dep.name}"
        (spec,) = pin.specifier
        assert spec.operator == "==", f"{pin}: not an exact pin"
        assert dep.specifier.contains(spec.version), f"{pin} is outside pyproject's {dep}"
        assert dep.extras <= pin.extras, f"{pin} lacks the extras of pyproject's {dep}"
