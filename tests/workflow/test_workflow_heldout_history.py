"""The held-out curve as a user gets it: a tiny DAG with `eval.heldout` and `schedule.keep_every` trains,
keeps its checkpoints, scores every kept one in each run's evaluation job (`eval/heldout_history.json`),
and the report draws the curve from the bases to the final checkpoints; the last kept checkpoint is the
final one, so its score is `eval/heldout.json`'s."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from test_workflow_run import TINY
from workflow_helpers import REPO, snakemake, write_config

pytestmark = pytest.mark.slow

KEPT = ["eval.heldout={prompts: 16, samples: 1}", "schedule.keep_every=2"]


def test_the_dag_scores_every_kept_checkpoint_and_reports_the_curve(tmp_path):
    cfg = write_config(tmp_path / "tiny.yaml", "config/ci.yaml", "results_dir=results", *TINY, *KEPT)
    snakemake(
        tmp_path, "--profile", str(REPO / "profiles" / "local"), "--cores", "1", "--configfile", str(cfg)
    )
    tier = tmp_path / "results" / "smoke"
    for seed in (0, 1):
        run = tier / "runs" / "grpo" / "tiny" / "bf16" / "none" / f"seed{seed}"
        history = json.loads((run / "eval" / "heldout_history.json").read_text())
        assert [e["step"] for e in history["history"]] == [2, 4]
        final = json.loads((run / "eval" / "heldout.json").read_text())["results"]
        assert history["history"][-1]["results"] == final  # step 4's weights are the final checkpoint's
    table = pd.read_csv(tier / "tables" / "heldout_curve.csv")
    assert list(table["arm"].unique()) == ["bf16"] and list(table["step"]) == [0, 2, 4]
    assert list(table["units"]) == [2, 2, 2]  # both seeds (two bases) at every step
    assert (tier / "plots" / "heldout_curve.png").stat().st_size > 1000
