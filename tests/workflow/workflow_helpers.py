"""Run the repository's Snakefile on configs derived from the shipped ones with `--set`-style overrides:
from a scratch working directory (its own .snakemake/ and results/), or from the repository with
`results_dir` pointed at a scratch folder (`in_repo`) where rules read repository files."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from fp8rl.config_loader import apply_overrides

REPO = Path(__file__).resolve().parents[2]
SNAKEFILE = REPO / "Snakefile"


def write_config(dest: Path, base: str = "config/ci.yaml", *overrides: str) -> Path:
    """`base` (repo-relative or absolute) with `key.path=value` overrides applied, written to `dest`."""
    data = yaml.safe_load((REPO / base).read_text())
    dest.write_text(yaml.safe_dump(apply_overrides(data, overrides)))
    return dest


def in_repo(results: Path) -> list[str]:
    """Arguments that keep a run in the repository's directory but its results under `results`."""
    return ["--directory", str(REPO), "--config", f"results_dir={results}"]


def snakemake(
    workdir: Path | None, *args: str, timeout: float = 600, check: bool = True
) -> subprocess.CompletedProcess:
    """`python -m snakemake -s REPO/Snakefile [--directory workdir] ARGS` with this interpreter."""
    where = ["--directory", str(workdir)] if workdir is not None else []
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), *where, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def planned_jobs(workdir: Path | None, *args: str) -> dict[str, int]:
    """Job counts per rule of a dry run (`snakemake -n --quiet rules`); {} when nothing is to be done."""
    proc = snakemake(workdir, "-n", "--quiet", "rules", *args)
    counts = {}
    for line in proc.stdout.splitlines():
        m = re.fullmatch(r"(\w+)\s+(\d+)", line.strip())
        if m and m.group(1) != "total":
            counts[m.group(1)] = int(m.group(2))
    return counts
