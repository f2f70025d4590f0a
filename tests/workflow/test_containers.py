"""The paper tier on Slurm, planned: every job under the Slurm executor and the Slurm profile, the
container rules' commands, and the image each rule runs in. No cluster, Docker or Apptainer needed:
a stub `apptainer` on PATH answers Snakemake's version check."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from workflow_helpers import REPO, in_repo, snakemake

from fp8rl.config_loader import load_config

PAPER = REPO / "config" / "paper.yaml"


@pytest.fixture
def stub_apptainer(tmp_path, monkeypatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "apptainer"
    exe.write_text("#!/bin/sh\necho 'apptainer version 1.4.1'\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return exe


def _job_counts(stdout: str) -> dict[str, int]:
    counts = {}
    for line in stdout.splitlines():
        m = re.fullmatch(r"(\w+)\s+(\d+)", line.strip())
        if m and m.group(1) != "total":
            counts[m.group(1)] = int(m.group(2))
    return counts


def test_paper_dry_run_on_slurm_plans_every_job(tmp_path, stub_apptainer):
    pytest.importorskip(
        "snakemake_executor_plugin_slurm", reason="pip install snakemake-executor-plugin-slurm"
    )
    cfg = load_config(PAPER)
    proc = snakemake(
        None, "--profile", str(REPO / "profiles" / "slurm"), "--executor", "slurm", "--configfile", str(PAPER),
        "-n", "-p", *in_repo(tmp_path),
    )  # fmt: skip
    jobs = _job_counts(proc.stdout)
    n = len(cfg.runs())
    assert (jobs["train"], jobs["eval_lm"], jobs["eval_agent"]) == (n, n, n) and n == 162
    assert jobs["container_image"] == 4 and jobs["container_sif"] == 4
    out = proc.stdout
    for name in ("train", "eval", "bfcl", "cpu"):
        assert re.search(
            rf"fp8rl containers build {name} --config \S+ --out {tmp_path}/containers/{name}\.json", out
        )
        assert re.search(
            rf"fp8rl containers sif {name} --config \S+ --out {tmp_path}/containers/{name}\.sif", out
        )


def test_prebuilt_images_are_pulled_not_built(tmp_path, stub_apptainer):
    proc = snakemake(None, "containers", "--configfile", str(PAPER), "-n", "--quiet", "rules", *in_repo(tmp_path),
                     "containers={mode: prebuilt, tag: sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}")  # fmt: skip
    assert _job_counts(proc.stdout) == {"container_sif": 4, "containers": 1}


def test_no_containers_in_the_smoke_tier(tmp_path):
    proc = snakemake(None, "-n", "--quiet", "rules", *in_repo(tmp_path))
    assert not any(k.startswith("container") for k in _job_counts(proc.stdout))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fp8rl.cli", *args], capture_output=True, text=True, cwd=REPO
    )


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_build_and_sif_commands_in_a_dry_run(engine, tmp_path):
    sets = ["--set", f"containers.engine={engine}", "--set", "containers.tag=v2"]
    build = _cli(
        "containers",
        "build",
        "eval",
        "--config",
        str(PAPER),
        *sets,
        "--out",
        str(tmp_path / "e.json"),
        "--dry-run",
    )
    assert build.returncode == 0, build.stderr
    (line,) = [ln for ln in build.stdout.splitlines() if ln.startswith("+ ")]
    prog = ["docker", "buildx", "build"] if engine == "docker" else ["podman", "build"]
    assert line.split()[1 : 1 + len(prog)] == prog
    assert "--file containers/eval/Dockerfile --tag ghcr.io/fp8rl/fp8rl-eval:v2" in line
    assert "--label org.opencontainers.image.revision=" in line and line.endswith(" .")
    sif = _cli(
        "containers",
        "sif",
        "eval",
        "--config",
        str(PAPER),
        *sets,
        "--out",
        str(tmp_path / "e.sif"),
        "--dry-run",
    )
    assert sif.returncode == 0, sif.stderr
    cmds = [ln[2:] for ln in sif.stdout.splitlines() if ln.startswith("+ ")]
    src = "docker-daemon://ghcr.io/fp8rl/fp8rl-eval:v2" if engine == "docker" else "oci-archive://"
    assert cmds[-1 if engine == "docker" else 1].startswith("apptainer build --force") and src in "\n".join(
        cmds
    )
    assert not (tmp_path / "e.json").exists() and not (tmp_path / "e.sif").exists()


def test_prebuilt_sif_pulls_from_the_registry(tmp_path):
    sif = _cli("containers", "sif", "train", "--config", str(PAPER), "--set", "containers.mode=prebuilt",
               "--set", "containers.tag=sha256:" + "d" * 64, "--out", str(tmp_path / "t.sif"), "--dry-run")  # fmt: skip
    assert sif.returncode == 0, sif.stderr
    assert (
        f"apptainer pull --force {tmp_path}/.t.sif.partial docker://ghcr.io/fp8rl/fp8rl-train@sha256:{'d' * 64}"
        in sif.stdout
    )


def test_pins_check_command():
    res = _cli("containers", "check")
    assert res.returncode == 0 and res.stdout.strip().endswith(": ok"), res.stdout + res.stderr
    assert json.loads(json.dumps(res.stdout))  # plain text, no traceback
