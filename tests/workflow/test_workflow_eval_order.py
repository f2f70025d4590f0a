"""A run is evaluated as soon as it has trained, before the DAG starts the next training
(workflows/eval.smk's `EVAL_PRIORITY`): a study that spans sessions then has its finished runs evaluated
at a session's stop, and `fp8rl archive save` keeps only evaluated runs."""

from __future__ import annotations

import re

import pytest
from test_workflow_conventions import TINY
from workflow_helpers import REPO, snakemake, write_config

# the conventions test's tiny tier with three runs and the held-out endpoint (the eval rule's one suite)
THREE_RUNS = ["results_dir=results", *TINY, "matrix.seeds=[0, 1, 2]", "eval.heldout={prompts: 8, samples: 1}"]
JOB_START = re.compile(r"^Job \d+: (?P<rule>\w+): ", re.M)  # the local profile's line as a job starts


@pytest.mark.slow
def test_each_run_is_evaluated_before_the_next_training_starts(tmp_path):
    cfg = write_config(tmp_path / "three_runs.yaml", "config/ci.yaml", *THREE_RUNS)
    args = ["--profile", str(REPO / "profiles" / "local"), "--cores", "1", "--configfile", str(cfg)]
    proc = snakemake(tmp_path, *args, timeout=900)
    started = [m["rule"] for m in JOB_START.finditer(proc.stdout + proc.stderr)]
    # one core: each run's evaluation runs before the next training, not after all of them (without the
    # priority Snakemake ran `train, eval, train, train, eval, eval` here)
    assert [rule for rule in started if rule in ("train", "eval")] == ["train", "eval"] * 3, started
