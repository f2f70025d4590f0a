"""Where a result came from: git commit, package versions, machine, numerics mode (the kernel path, the
CPU and its ISA: fp8rl.numerics), config digest."""

from __future__ import annotations

import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

PACKAGES = ("fp8rl", "torch", "torchao", "transformers", "lm_eval", "snakemake", "pandas", "numpy")


@lru_cache(maxsize=1)
def git_commit(cwd: str | None = None) -> str | None:
    """The commit of the working tree (with '+dirty' when it has changes); None outside a checkout."""
    cwd = cwd or str(Path(__file__).resolve().parent)
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("+dirty" if dirty else "")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name.replace("_", "-"))
        except metadata.PackageNotFoundError:
            continue
    return out


def machine() -> dict[str, str | int]:
    import os

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count() or 0,
    }


def provenance(config_digest: str | None = None, container_digest: str | None = None) -> dict:
    from fp8rl import numerics

    out: dict = {
        "git_commit": git_commit(),
        "packages": package_versions(),
        "machine": machine(),
        "numerics": numerics.state(),
    }
    if config_digest:
        out["config_digest"] = config_digest
    if container_digest:
        out["container_digest"] = container_digest
    return out
