"""The GPU images' software stacks agree with themselves: each lock resolves its requirements.in's `==`
pins, the CUDA base of an image that compiles against torch matches the CUDA of the locked torch build,
the eval image can run vLLM data-parallel replicas, and the BFCL image has its own vLLM."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from fp8rl.containers import CONTAINERS_DIR, IMAGES, base_images, lock_entries


def locked(name: str, root: Path = CONTAINERS_DIR) -> dict[str, str]:
    """package -> version of an image's requirements.lock (hashes and comments dropped)."""
    out = {}
    for entry in lock_entries(root / name / "requirements.lock"):
        req = Requirement(entry.split(" --hash")[0])
        out[canonicalize_name(req.name)] = str(req.specifier).removeprefix("==")
    return out


def exact_pins(name: str) -> dict[str, str]:
    """The `==` pins of an image's requirements.in."""
    pins = {}
    for line in (CONTAINERS_DIR / name / "requirements.in").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        specs = [s for s in req.specifier if s.operator == "=="]
        if specs:
            pins[canonicalize_name(req.name)] = specs[0].version
    return pins


def torch_cuda(name: str, root: Path = CONTAINERS_DIR) -> tuple[int, int]:
    """The CUDA (major, minor) the locked torch was built for: a `+cuXYZ` local version, else the
    `nvidia-cuda-runtime` wheel torch depends on (PyPI's default build)."""
    lock = locked(name, root)
    local = re.search(r"\+cu(\d+)(\d)$", lock["torch"])
    if local:
        return int(local.group(1)), int(local.group(2))
    runtime = lock.get("nvidia-cuda-runtime") or lock.get("nvidia-cuda-runtime-cu12")
    assert runtime, f"containers/{name}/requirements.lock: torch {lock['torch']} with no CUDA runtime wheel"
    major, minor = runtime.split(".")[:2]
    return int(major), int(minor)


def base_cuda(name: str, root: Path = CONTAINERS_DIR) -> tuple[int, int] | None:
    """CUDA (major, minor) of an image's `nvidia/cuda:X.Y.Z-...` base; None for a base without CUDA."""
    for ref in base_images(root / name / "Dockerfile"):
        m = re.match(r"^(?:docker\.io/)?nvidia/cuda:(\d+)\.(\d+)\.\d+-", ref)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


@pytest.mark.parametrize("name", IMAGES)
def test_every_exact_pin_of_requirements_in_is_the_locked_version(name):
    lock = locked(name)
    for package, version in exact_pins(name).items():
        assert package in lock, f"containers/{name}/requirements.lock lacks {package}=={version}"
        assert lock[package] == version, (
            f"containers/{name}: requirements.in pins {package}=={version}, the lock has {lock[package]}"
        )


@pytest.mark.parametrize("name", ["train", "eval"])
def test_cuda_base_matches_the_locked_torch_build(name):
    """Transformer Engine's torch extension is compiled with the base's nvcc against torch's CUDA."""
    base = base_cuda(name)
    assert base is not None, f"containers/{name}/Dockerfile: not an nvidia/cuda base"
    assert base == torch_cuda(name), (
        f"containers/{name}: base CUDA {base} but torch {locked(name)['torch']} is built for CUDA "
        f"{torch_cuda(name)}"
    )


def test_parsers_read_both_torch_conventions(tmp_path):
    """A `+cu128` wheel from PyTorch's index and PyPI's default build (CUDA from its runtime wheel)."""
    root = tmp_path / "containers"
    for name, lock, base in (
        ("a", "torch==2.7.1+cu128 \\\n    --hash=sha256:" + "a" * 64 + "\n", "12.8.1"),
        (
            "b",
            "nvidia-cuda-runtime==13.0.96 \\\n    --hash=sha256:" + "b" * 64 + "\ntorch==2.11.0\n",
            "13.0.0",
        ),
    ):
        (root / name).mkdir(parents=True)
        (root / name / "requirements.lock").write_text(lock)
        (root / name / "Dockerfile").write_text(
            f"FROM nvidia/cuda:{base}-cudnn-devel-ubuntu24.04@sha256:{'c' * 64}\n"
        )
    assert torch_cuda("a", root) == base_cuda("a", root) == (12, 8)
    assert torch_cuda("b", root) == base_cuda("b", root) == (13, 0)
    (root / "b" / "Dockerfile").write_text(f"FROM nvidia/cuda:12.8.1-devel-ubuntu24.04@sha256:{'c' * 64}\n")
    assert base_cuda("b", root) != torch_cuda("b", root)  # the mismatch the test above catches


def test_train_and_containers_readme_state_the_driver():
    text = (CONTAINERS_DIR / "README.md").read_text()
    major = torch_cuda("train")[0]
    assert f"CUDA {major}" in text and re.search(r"driver[^.\n]*≥ ?\d{3}", text)


def test_eval_image_can_run_data_parallel_replicas():
    """lm-eval runs vLLM with data_parallel_size > 1 as Ray actors."""
    lock = locked("eval")
    assert "vllm" in lock and "ray" in lock


def test_bfcl_image_has_its_own_vllm_on_its_torch():
    """bfcl generates with vLLM: the lock pins the vLLM of bfcl-eval's `oss_eval_vllm` extra, resolved
    together with its torch and with bfcl-eval's numpy 1.26 kept."""
    lock = locked("bfcl")
    assert "vllm" in lock and exact_pins("bfcl")["vllm"] == lock["vllm"]
    assert lock["numpy"].startswith("1.26")
    assert "vllm" in via_of("bfcl", "torch"), "torch in the bfcl lock is not resolved for vllm"


def via_of(name: str, package: str) -> set[str]:
    """The packages a lock entry is there for (uv's `# via` comment)."""
    lines = (CONTAINERS_DIR / name / "requirements.lock").read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"{package}=="))
    via = set()
    for ln in lines[start + 1 :]:
        if not ln.startswith(" "):
            break
        text = ln.strip().removeprefix("# via").removeprefix("#").strip()
        if ln.strip().startswith("#") and text:
            via.add(text)
    return via
