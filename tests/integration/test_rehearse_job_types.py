"""`fp8rl verl rehearse` stands for every job the paper tier's DAG plans: each rule of a dry run of
config/paper.yaml is one that a job type of fp8rl.adapters.rehearse_jobs rehearses (or names as not
rehearsed), so a job type dropped from the command, or a new rule without one, fails here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fp8rl.adapters.rehearse_jobs import JOB_TYPES, planned
from fp8rl.config_loader import load_config

REPO = Path(__file__).resolve().parents[2]


def dag_rules(config: Path, results: Path) -> set[str]:
    """The rules a dry run of the DAG plans jobs of (`snakemake -n --quiet rules`), less the target."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(REPO), "-n",
         "--quiet", "rules", "--configfile", str(config), "--config", f"results_dir={results}"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rules = {m[1] for m in re.finditer(r"^(\w+)\s+\d+$", proc.stdout, re.MULTILINE)}
    return rules - {"total", "all"}


@pytest.mark.slow
def test_every_rule_of_the_paper_dag_is_a_rehearsed_job_type(tmp_path):
    config = REPO / "config" / "paper.yaml"
    rules = dag_rules(config, tmp_path)
    assert {"train", "data", "eval_lm", "eval_agent", "report", "fetch_data"} <= rules
    jobs = planned(load_config(config))
    covered = {rule for job in jobs for rule in job.rules}
    assert rules == covered, (
        f"rules without a job type: {rules - covered}; job types of no rule: {covered - rules}"
    )
    # every job type the command runs for the paper tier, none left out as not applying to it
    assert [j.name for j in jobs] == list(JOB_TYPES)
